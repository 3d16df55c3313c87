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
