# Routed (mixture-of-experts) models on the CPU target: one rank against
# --dp 2, --tp 2 and --pp 2, DeepSeek-MoE trains, info counts, the CUDA target writes the kernels.
add_test(NAME moe/cpu COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_cpu.sh)
set_tests_properties(moe/cpu PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
# The drops and load a run reports with a capacity factor, on one rank and
# under --dp/--tp/--pp 2 (about 3 s of CPU).
add_test(NAME moe/drops COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_drops.sh)
set_tests_properties(moe/drops PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
