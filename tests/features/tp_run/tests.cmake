# Tensor(+sequence)-parallel training over MPI against one rank, with real
# programs: losses over 10 steps, the gathered gradients of step 1 and the
# bytes every rank sent (run.sh prints the table). The ranks run under
# mpirun through `shardc run --tp N`, so the tests need MPI; they hold the
# lock `mpirun` with the tests of tests/runtime/comm.
if(TARGET shard_comm_mpi)
  add_executable(tptool ${TESTS_DIR}/features/tp_run/tptool.c)
  target_link_libraries(tptool PRIVATE shard_rt_f32)
  # parallel_residual is tests/features/tp's model of its own (one all-reduce per
  # layer for attention and MLP together), and output_bias an output layer
  # with a bias of its own, in the long checks.
  foreach(model gpt2 llama parallel_residual output_bias)
    add_test(NAME tp_run/${model}
             COMMAND bash ${TESTS_DIR}/features/tp_run/run.sh $<TARGET_FILE:tptool> ${model})
  endforeach()
  # Checkpoints across t, resume, sampling and failures.
  add_test(NAME tp_run/checkpoint
           COMMAND bash ${TESTS_DIR}/features/tp_run/checkpoint.sh $<TARGET_FILE:rt_testtool>
                   $<TARGET_FILE:tptool> ${TESTS_DIR}/runtime/comm/mpirun.sh
                   ${MPIEXEC_EXECUTABLE})
  set(tp_run_tests tp_run/gpt2 tp_run/llama tp_run/parallel_residual tp_run/output_bias
      tp_run/checkpoint)
  set_tests_properties(${tp_run_tests} PROPERTIES TIMEOUT 300 RESOURCE_LOCK mpirun LABELS tp_run)
  # Open MPI leaks at exit what no suppression can name (tests/runtime/comm).
  if(SHARDC_SANITIZE)
    set_tests_properties(${tp_run_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
