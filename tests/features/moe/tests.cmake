# Routed (mixture-of-experts) models on the CPU target: one rank against
# --dp 2, --tp 2 and --pp 2, DeepSeek-MoE trains, info counts, the CUDA target writes the kernels.
add_test(NAME moe/cpu COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/moe_cpu.sh)
set_tests_properties(moe/cpu PROPERTIES TIMEOUT 120 LABELS moe RESOURCE_LOCK mpirun)
