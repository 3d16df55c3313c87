# Pipeline and data parallelism over MPI against one rank, with real
# programs (`shardc run --tp T --pp P --dp D --vpp V ...`): the losses of 10
# steps and the reduced step-1 gradients (grid.sh), and checkpoints that
# move between layouts (reshard.sh, checkpoint.sh). The quick grid is a
# representative part of the full one, which `make test-full` runs (label
# `full`, which `make test` leaves out). They hold the lock `mpirun` with tests/runtime/comm and tp_run.
if(TARGET shard_comm_mpi)
  set(pp_run_tests)
  # Under the sanitizers the programs run about ten times slower: there the
  # grid is cut to the configurations that take every path once.
  if(SHARDC_SANITIZE)
    set(grid_mode smoke)
  else()
    set(grid_mode quick)
  endif()
  foreach(model gpt2 llama)
    add_test(NAME pp_run/grid_${model}
             COMMAND bash ${TESTS_DIR}/features/pp_run/grid.sh $<TARGET_FILE:tptool>
                     ${model} ${grid_mode})
    list(APPEND pp_run_tests pp_run/grid_${model})
    # The quick grid is one of the long checks (tests/CMakeLists.txt); the
    # smoke grid, whose three configurations take every path once, keeps
    # the layouts in `make test`.
    if(NOT SHARDC_SANITIZE)
      add_test(NAME pp_run/smoke_${model}
               COMMAND bash ${TESTS_DIR}/features/pp_run/grid.sh $<TARGET_FILE:tptool>
                       ${model} smoke)
      list(APPEND pp_run_tests pp_run/smoke_${model})
    endif()
    if(SHARDC_TEST_FULL)
      add_test(NAME pp_run/full_${model}
               COMMAND bash ${TESTS_DIR}/features/pp_run/grid.sh $<TARGET_FILE:tptool>
                       ${model} full)
      set_tests_properties(pp_run/full_${model} PROPERTIES TIMEOUT 7200 LABELS full
                           RESOURCE_LOCK mpirun)
    endif()
  endforeach()
  add_test(NAME pp_run/reshard
           COMMAND bash ${TESTS_DIR}/features/pp_run/reshard.sh $<TARGET_FILE:tptool>)
  list(APPEND pp_run_tests pp_run/reshard)
  # Checkpoints under seven layouts: the same files, gradients, a save
  # killed midway, a tensor missing on one stage.
  add_test(NAME pp_run/checkpoint
           COMMAND bash ${TESTS_DIR}/features/pp_run/checkpoint.sh $<TARGET_FILE:tptool>)
  list(APPEND pp_run_tests pp_run/checkpoint)
  # Launch mistakes: a stage alone, stages out of order, another global batch.
  add_test(NAME pp_run/errors
           COMMAND bash ${TESTS_DIR}/features/pp_run/errors.sh $<TARGET_FILE:tptool>
                   ${TESTS_DIR}/runtime/comm/mpirun.sh ${MPIEXEC_EXECUTABLE})
  list(APPEND pp_run_tests pp_run/errors)
  set_tests_properties(${pp_run_tests} PROPERTIES TIMEOUT 900 RESOURCE_LOCK mpirun LABELS pp_run)
  if(SHARDC_SANITIZE)
    set_tests_properties(${pp_run_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
