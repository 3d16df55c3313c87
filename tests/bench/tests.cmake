# The benchmarks under bench/ stay manual (minutes, on a quiet machine);
# these check that their scripts run, on tiny shapes, in a few seconds.
add_test(NAME bench/cpu_train_quick COMMAND bash ${TESTS_DIR}/bench/cpu_train_quick.sh)
set_tests_properties(bench/cpu_train_quick PROPERTIES TIMEOUT 300 LABELS bench
                     SKIP_RETURN_CODE 77 RESOURCE_LOCK mpirun)
# Open MPI leaks at exit what no suppression can name (tests/runtime/comm);
# the quick bench's t=2 run goes through mpirun.
if(SHARDC_SANITIZE)
  set_tests_properties(bench/cpu_train_quick PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
endif()
# bench/moe_cpu.sh's quick mode: the tiny Mixtral against transformers'
# MixtralForCausalLM, a few steps each (about 5 s of CPU, most of it
# importing transformers). Skipped (77) without transformers.
add_test(NAME bench/moe_cpu_quick COMMAND bash ${TESTS_DIR}/bench/moe_cpu_quick.sh)
set_tests_properties(bench/moe_cpu_quick PROPERTIES TIMEOUT 300 LABELS bench SKIP_RETURN_CODE 77)
