# CPU kernels against naive double references and finite differences, in
# both real types (tests/kernels/test_kernels.c says what is checked). Two
# threads at least, so the determinism checks compare real splits of work;
# passive waiting, since they also run 3 threads on machines with fewer cores.
set(KERNEL_TESTS_DIR ${CMAKE_CURRENT_LIST_DIR})
foreach(flavour f32 f64)
  add_executable(test_kernels_${flavour} ${KERNEL_TESTS_DIR}/test_kernels.c)
  target_link_libraries(test_kernels_${flavour} PRIVATE shard_kernels_${flavour})
  add_test(NAME kernels/${flavour} COMMAND test_kernels_${flavour})
  set_tests_properties(kernels/${flavour} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
endforeach()
