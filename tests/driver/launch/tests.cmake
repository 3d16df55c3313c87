# Launching (docs/training.md#launching): the launch.sh that `shardc
# compile` writes, under mpirun (mpirun.sh), and a real one-node Slurm that
# the test starts and stops itself, running the programs under srun
# (slurm.sh; a skip, exit 77, where Slurm cannot run). Both start ranks and
# hold the lock `mpirun` with the other tests that do.
if(TARGET shard_comm_mpi)
  foreach(script mpirun slurm)
    add_test(NAME launch/${script}
             COMMAND bash ${TESTS_DIR}/driver/launch/${script}.sh $<TARGET_FILE:tptool>)
    set_tests_properties(launch/${script} PROPERTIES TIMEOUT 900 RESOURCE_LOCK mpirun
                         LABELS launch SKIP_RETURN_CODE 77)
    if(SHARDC_SANITIZE)
      set_tests_properties(launch/${script} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endif()
