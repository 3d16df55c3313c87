# Routed (mixture-of-experts) models on the CPU target: one rank against
# --dp 2, --tp 2 and --pp 2, DeepSeek-MoE trains, info counts, the CUDA target writes the kernels.
add_test(NAME moe/cpu COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_cpu.sh)
set_tests_properties(moe/cpu PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
# The drops and load a run reports with a capacity factor, on one rank and
# under --dp/--tp/--pp 2 (about 3 s of CPU).
add_test(NAME moe/drops COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_drops.sh)
set_tests_properties(moe/drops PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
# Expert parallelism (--ep) against one rank: moe_ep/quick in make test (ep
# 2 and 4 of d, capacity drops, checkpoints across ep with ZeRO-1, the
# flags' errors), moe_ep/grid under the long label (ep with t, sequence
# parallelism, p, v, zb-h1, full recomputation and ZeRO-1, up to 8 ranks). tp_run's tptool compares
# the gradient dumps, so both need MPI.
if(TARGET shard_comm_mpi)
  foreach(mode quick grid)
    add_test(NAME moe_ep/${mode}
             COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_ep.sh $<TARGET_FILE:tptool> ${mode})
  endforeach()
  set_tests_properties(moe_ep/quick PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
  set_tests_properties(moe_ep/grid PROPERTIES TIMEOUT 600 LABELS moe RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    set_tests_properties(moe_ep/quick moe_ep/grid PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
