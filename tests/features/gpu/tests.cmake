# CUDA kernels against their CPU twins (tests/features/gpu/test_kernels_cuda.c says
# what is checked). Built wherever nvcc is found, so CI compiles and links
# it; without a CUDA device it prints why and exits 77, which ctest reports
# as skipped. tests/features/gpu/run.sh runs it (and every other GPU check) on a GPU.
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

# The GPU kit's quick rehearsal (docs/gpu.md, tests/features/gpu/kit/rehearse.sh):
# the quick kit built with the CPU emulator's programs, then its runner's
# few rows run in a minimal Debian root file system through chroot, so
# that a library the kit lacks fails here. The kit and the root file
# system are built once by the fixture (and reused while nothing they
# hold changed); the rehearsal itself takes well under a minute. Both
# need the NCCL stand-in (MPI), a shardc that compiles --target cuda
# (nvcc) and, for the rehearsal, root; they skip otherwise.
# The kit is built from the Release build (make gpu-kit); a sanitizer
# build's programs would need the sanitizer runtimes in the root file
# system, and its CPU references under mpirun report Open MPI's leaks at
# exit, so the sanitizer build leaves the kit checks out.
if(TARGET shard_rt_cuda_nccl_emu AND TARGET shard_kernels_cuda AND NOT SHARDC_SANITIZE)
  add_test(NAME gpu/kit_quick_build
           COMMAND bash -c "${CMAKE_SOURCE_DIR}/tests/features/gpu/kit/rootfs.sh ${CMAKE_BINARY_DIR}/gpu-rootfs || exit 77; ${CMAKE_SOURCE_DIR}/scripts/gpu-kit.sh --emu --quick ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/gpu-kit-emu-quick")
  set_tests_properties(gpu/kit_quick_build PROPERTIES LABELS "gpu;emu" SKIP_RETURN_CODE 77
                       TIMEOUT 900 FIXTURES_SETUP gpu_kit_quick RESOURCE_LOCK mpirun
                       ENVIRONMENT "OMP_NUM_THREADS=1")
  add_test(NAME gpu/kit_rehearsal
           COMMAND ${CMAKE_SOURCE_DIR}/tests/features/gpu/kit/rehearse.sh --quick ${CMAKE_BINARY_DIR} 1)
  set_tests_properties(gpu/kit_rehearsal PROPERTIES LABELS "gpu;emu" SKIP_RETURN_CODE 77
                       TIMEOUT 300 FIXTURES_REQUIRED gpu_kit_quick RESOURCE_LOCK mpirun
                       PASS_REGULAR_EXPRESSION "tier 1: [1-9][0-9]* PASS, 0 FAIL")
endif()
