# Tests of the communication layer (runtime/comm.h, MPI backend) and of the
# rank layout (abi/mesh.h). Each run under mpirun goes through
# mpirun.sh, which applies the launch recipe of comm.h; they hold the lock
# `mpirun` so that ctest -j does not pile 8-rank jobs onto a small machine.
if(TARGET shard_comm_mpi)
  set(COMM_TESTS_DIR ${TESTS_DIR}/runtime/comm)
  add_executable(comm_test ${COMM_TESTS_DIR}/comm_test.c)
  target_link_libraries(comm_test PRIVATE shard_comm_mpi m)
  set(COMM_MPIRUN sh ${COMM_TESTS_DIR}/mpirun.sh ${MPIEXEC_EXECUTABLE})
  set(COMM_FAIL bash ${COMM_TESTS_DIR}/fail.sh ${COMM_TESTS_DIR}/mpirun.sh ${MPIEXEC_EXECUTABLE})
  set(COMM_PROG $<TARGET_FILE:comm_test>)

  add_test(NAME comm/layout COMMAND comm_test layout)
  # Without mpirun a program is a world of one rank.
  add_test(NAME comm/singleton COMMAND comm_test check)
  set(comm_tests comm/layout comm/singleton)
  foreach(np 2 4 8)
    add_test(NAME comm/np${np} COMMAND ${COMM_MPIRUN} ${np} ${COMM_PROG} check)
    list(APPEND comm_tests comm/np${np})
  endforeach()

  # Failures: one rank goes down while the others block; every one must.
  add_test(NAME comm/fail_fatal COMMAND ${COMM_FAIL} 4
           "shardc: error: rank 1: injected failure, on purpose" ${COMM_PROG} fail 1)
  add_test(NAME comm/fail_fatal_np8 COMMAND ${COMM_FAIL} 8
           "shardc: error: rank 5: injected failure, on purpose" ${COMM_PROG} fail 5)
  add_test(NAME comm/fail_exit COMMAND ${COMM_FAIL} 4
           "exited with non-zero status" ${COMM_PROG} exit 2)
  add_test(NAME comm/fail_mpi_error COMMAND ${COMM_FAIL} 4
           "shardc: error: rank 1: MPI_Recv on the world communicator failed: MPI_ERR_TRUNCATE"
           ${COMM_PROG} truncate)
  add_test(NAME comm/fail_short_message COMMAND ${COMM_FAIL} 2
           "shardc: error: rank 1: receive on the world communicator: rank 0 sent 5 elements, 10 were expected"
           ${COMM_PROG} short)
  add_test(NAME comm/fail_mesh COMMAND ${COMM_FAIL} 4
           "shardc: error: rank [0-3]: the mesh t=2 x p=3 x d=5 needs 30 ranks, but the world has 4"
           ${COMM_PROG} mesh)
  add_test(NAME comm/fail_misuse COMMAND ${COMM_FAIL} 4
           "shardc: error: rank 3: rt_comm_send on the world communicator: peer 99 is out of range"
           ${COMM_PROG} misuse 3)
  add_test(NAME comm/fail_alltoallv_counts COMMAND ${COMM_FAIL} 4
           "shardc: error: rank 2: rt_comm_alltoallv on the world communicator: rank 0 sends 2 elements here, 3 were expected"
           ${COMM_PROG} a2a 2)
  list(APPEND comm_tests comm/fail_fatal comm/fail_fatal_np8 comm/fail_exit comm/fail_mpi_error
       comm/fail_short_message comm/fail_mesh comm/fail_misuse comm/fail_alltoallv_counts)
  set_tests_properties(${comm_tests} PROPERTIES TIMEOUT 30 RESOURCE_LOCK mpirun)
  # Open MPI does not free all it allocates, from components it has already
  # unloaded at exit, so no suppression file can name the leaks: leak
  # checking is off for the programs that start MPI (ASan's other checks
  # stay on). comm/layout never starts MPI and keeps it.
  if(SHARDC_SANITIZE)
    list(REMOVE_ITEM comm_tests comm/layout)
    set_tests_properties(${comm_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
