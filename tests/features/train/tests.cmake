# The training runtime with real compiled programs (gpt2.shard at a tiny
# shape), where tests/runtime uses a hand-written toy: resume bit for bit,
# saves interrupted mid-write, bad data and checkpoints. Each test prints
# the numbers and messages it checks.
foreach(script resume errors)
  add_test(NAME train/${script}
           COMMAND bash ${TESTS_DIR}/features/train/${script}.sh $<TARGET_FILE:rt_testtool>)
  set_tests_properties(train/${script} PROPERTIES TIMEOUT 300 LABELS train)
endforeach()
# The demo shape on 1, 4 and 8 ranks against losses recorded to the bit.
if(TARGET shard_comm_mpi)
  set(demo_bits_build "${CMAKE_C_COMPILER_ID}-${CMAKE_C_COMPILER_VERSION}")
  if(SHARDC_SANITIZE)
    string(APPEND demo_bits_build "-sanitize")
  endif()
  # The kernels and the rank programs are built with -march=native, so the
  # bits depend on the processor the compiler sees, not only on its widest
  # vector unit: two AVX-512 processors of different generations get
  # different code (vector widths, FMA contraction) and different bits in
  # the reductions. The key names the processor as the compiler resolves
  # it (gcc's -Q --help=target, clang's -target-cpu).
  execute_process(COMMAND ${CMAKE_C_COMPILER} -march=native -Q --help=target
                  OUTPUT_VARIABLE demo_bits_target ERROR_QUIET)
  string(REGEX MATCH "-march=[ \t]*([a-z0-9_.-]+)" demo_bits_m "${demo_bits_target}")
  set(demo_bits_cpu "${CMAKE_MATCH_1}")
  if(NOT demo_bits_cpu)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -march=native "-###" -x c -c /dev/null -o /dev/null
                    ERROR_VARIABLE demo_bits_target OUTPUT_QUIET)
    string(REGEX MATCH "\"-target-cpu\" \"([a-z0-9_.-]+)\"" demo_bits_m "${demo_bits_target}")
    set(demo_bits_cpu "${CMAKE_MATCH_1}")
  endif()
  if(demo_bits_cpu)
    string(APPEND demo_bits_build "-${demo_bits_cpu}")
  endif()
  add_test(NAME train/demo_bits
           COMMAND bash ${TESTS_DIR}/features/train/demo_bits.sh ${SHARDC_DATA_DIR}/austen_train.bin
                   ${TESTS_DIR}/features/train/demo_bits.expected ${demo_bits_build})
  set_tests_properties(train/demo_bits PROPERTIES TIMEOUT 600 LABELS train RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    set_tests_properties(train/demo_bits PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
