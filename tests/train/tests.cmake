# The training runtime with real compiled programs (gpt2.shard at a tiny
# shape), where tests/runtime uses a hand-written toy: resume bit for bit,
# saves interrupted mid-write, bad data and checkpoints. Each test prints
# the numbers and messages it checks.
foreach(script resume errors)
  add_test(NAME train/${script}
           COMMAND sh ${TESTS_DIR}/train/${script}.sh ${SHARDC} $<TARGET_FILE:rt_testtool>
                   ${CMAKE_SOURCE_DIR})
  set_tests_properties(train/${script} PROPERTIES TIMEOUT 300 LABELS train)
endforeach()
# The demo shape on 1, 4 and 8 ranks against losses recorded to the bit.
if(TARGET shard_comm_mpi)
  set(demo_bits_build "${CMAKE_C_COMPILER_ID}-${CMAKE_C_COMPILER_VERSION}")
  if(SHARDC_SANITIZE)
    string(APPEND demo_bits_build "-sanitize")
  endif()
  add_test(NAME train/demo_bits
           COMMAND sh ${TESTS_DIR}/train/demo_bits.sh ${SHARDC} ${SHARDC_DATA_DIR}/austen_train.bin
                   ${TESTS_DIR}/train/demo_bits.expected ${demo_bits_build})
  set_tests_properties(train/demo_bits PROPERTIES TIMEOUT 600 LABELS train RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    set_tests_properties(train/demo_bits PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
