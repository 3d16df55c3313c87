# CUDA kernels against their CPU twins (tests/gpu/test_kernels_cuda.c says
# what is checked). Built wherever nvcc is found, so CI compiles and links
# it; without a CUDA device it prints why and exits 77, which ctest reports
# as skipped. tests/gpu/run.sh runs it (and every other GPU check) on a GPU.
if(TARGET shard_kernels_cuda)
  add_executable(test_kernels_cuda ${CMAKE_CURRENT_LIST_DIR}/test_kernels_cuda.c)
  target_link_libraries(test_kernels_cuda PRIVATE shard_kernels_cuda shard_kernels_f32)
  add_test(NAME gpu/kernels COMMAND test_kernels_cuda)
  set_tests_properties(gpu/kernels PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
endif()

# The CUDA device layer (runtime/device_cuda.c) against the CPU kernels,
# skipped without a device; and, without a device, that a device call ends
# the program with a plain "no CUDA device" error and exit status 1.
if(TARGET shard_rt_cuda)
  add_executable(test_device_cuda ${CMAKE_CURRENT_LIST_DIR}/test_device_cuda.c)
  target_link_libraries(test_device_cuda PRIVATE shard_rt_cuda shard_kernels_f32)
  add_test(NAME gpu/device COMMAND test_device_cuda)
  set_tests_properties(gpu/device PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
  add_test(NAME gpu/no_device COMMAND test_device_cuda --no-device)
  set_tests_properties(gpu/no_device PROPERTIES SKIP_REGULAR_EXPRESSION "^SKIP:" LABELS gpu
                       PASS_REGULAR_EXPRESSION "error: no CUDA device")
endif()
