# Fuzzing the two readers of the compiler (the model language and the
# printed IR) and everything behind them in the default pipeline.
#
# fuzz_replay runs the seed corpus through the fuzzer's entry point in every
# build, so inputs that once crashed stay tested by plain ctest, under the
# sanitizers with gcc too (-DSHARDC_SANITIZE=ON). With clang, fuzz_frontend
# is the libFuzzer binary itself (`make fuzz` runs it).
set(FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(fuzz_replay ${FUZZ_DIR}/replay.c ${FUZZ_DIR}/fuzz_frontend.c)
target_link_libraries(fuzz_replay PRIVATE shard_frontend shard_passes shard_ir)
set_target_properties(fuzz_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
add_test(NAME fuzz.corpus_replay COMMAND fuzz_replay ${FUZZ_DIR}/corpus)
set_tests_properties(fuzz.corpus_replay PROPERTIES TIMEOUT 600)

option(SHARDC_FUZZ "Build the libFuzzer target fuzz_frontend (clang only)" ON)
if(SHARDC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  # libFuzzer steers by coverage of the code under test, so the compiler's
  # libraries get the coverage instrumentation (no fuzzer main: shardc and
  # the other tests link them as usual).
  foreach(lib shard_ir shard_frontend shard_passes)
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
    target_link_options(${lib} INTERFACE -fsanitize=fuzzer-no-link)
  endforeach()
  add_executable(fuzz_frontend ${FUZZ_DIR}/fuzz_frontend.c)
  target_compile_options(fuzz_frontend PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_frontend PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_frontend PRIVATE shard_frontend shard_passes shard_ir)
  set_target_properties(fuzz_frontend PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  # The libFuzzer binary replays the corpus too (files given, not a
  # directory: each runs once and nothing new is explored).
  file(GLOB FUZZ_CORPUS_FILES CONFIGURE_DEPENDS ${FUZZ_DIR}/corpus/*)
  add_test(NAME fuzz.libfuzzer_replay COMMAND fuzz_frontend ${FUZZ_CORPUS_FILES})
  set_tests_properties(fuzz.libfuzzer_replay PROPERTIES TIMEOUT 600)
endif()
