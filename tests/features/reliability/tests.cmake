# Reliability (docs/reliability.md): failing ranks end the whole job with
# one message, NaN steps, preemption, checkpoint checks, bad flags, plans
# larger than the machine's memory. They hold the
# lock `mpirun` with the other tests that start ranks.
if(TARGET shard_comm_mpi)
  set(reliability_tests)
  foreach(script failing_ranks nan preempt checkpoints keep_last resume_state determinism
                 bad_flags memory save_lock nan_update outputs checksums
                 launcher_death watchdog_load data_attacks hangs writes sizes
                 flat_sum)
    add_test(NAME reliability/${script}
             COMMAND sh ${TESTS_DIR}/features/reliability/${script}.sh ${SHARDC} ${CMAKE_SOURCE_DIR})
    list(APPEND reliability_tests reliability/${script})
  endforeach()
  set_tests_properties(${reliability_tests} PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun
                       LABELS reliability)
  if(SHARDC_SANITIZE)
    # SHARDC_SANITIZED: hangs.sh leaves out its `ulimit -v` attack, which
    # ASan's shadow memory (terabytes of address space) cannot run under.
    set_tests_properties(${reliability_tests} PROPERTIES
                         ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0;SHARDC_SANITIZED=1")
  endif()
endif()
