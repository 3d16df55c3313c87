# Reliability (docs/reliability.md): failing ranks end the whole job with
# one message, NaN steps, preemption, checkpoint checks, bad flags, plans
# larger than the machine's memory. They hold the
# lock `mpirun` with the other tests that start ranks.
if(TARGET shard_comm_mpi)
  set(reliability_tests)
  foreach(script failing_ranks nan preempt checkpoints keep_last resume_state determinism
                 bad_flags memory save_lock nan_update outputs checksums
                 launcher_death watchdog_load data_attacks hangs writes sizes
                 flat_sum compile_layers)
    add_test(NAME reliability/${script}
             COMMAND bash ${TESTS_DIR}/features/reliability/${script}.sh)
    list(APPEND reliability_tests reliability/${script})
  endforeach()
  # The new form (docs/testing.md): bash, the compiler from $SHARDC.
  add_test(NAME reliability/remote_beats
           COMMAND bash ${TESTS_DIR}/features/reliability/remote_beats.sh)
  list(APPEND reliability_tests reliability/remote_beats)
  set_tests_properties(${reliability_tests} PROPERTIES TIMEOUT 600 LABELS reliability)
  # The lock mpirun is for the tests that start ranks under mpirun; these
  # four compile (flat_sum, sizes) or run one process (keep_last,
  # save_lock) and need not wait in that chain.
  set(reliability_mpirun_tests ${reliability_tests})
  list(REMOVE_ITEM reliability_mpirun_tests reliability/flat_sum reliability/sizes
       reliability/keep_last reliability/save_lock)
  set_tests_properties(${reliability_mpirun_tests} PROPERTIES RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    # SHARDC_SANITIZED: hangs.sh leaves out its `ulimit -v` attack, which
    # ASan's shadow memory (terabytes of address space) cannot run under.
    set_tests_properties(${reliability_tests} PROPERTIES
                         ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0;SHARDC_SANITIZED=1")
  endif()
endif()
