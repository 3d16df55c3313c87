# Fuzzing the readers: the compiler's two (the model language and the
# printed IR, with everything behind them in the default pipeline) and
# those of our own files (safetensors checkpoints, the optimizer-state
# file, token shards, hardware descriptions, the manifest, the `latest`
# pointer, the checksum manifest, the state file's metadata) and the
# tokenizer files (vocab.json + merges.txt, tokenizer.json, tiktoken ranks)
# and the index of a sharded safetensors set (model.safetensors.index.json). Each harness is one
# LLVMFuzzerTestOneInput in tests/features/fuzz/fuzz_NAME.c; its seeds live in
# tests/features/fuzz/corpus/NAME/.
#
# fuzz_replay_NAME runs every corpus (all of tests/features/fuzz/corpus: the other
# harnesses' files are bad input for this one) through the harness's entry
# point in every build, so inputs that once crashed stay tested by plain
# ctest, under the sanitizers with gcc too (-DSHARDC_SANITIZE=ON). With
# clang, fuzz_NAME is the libFuzzer binary itself (`make fuzz` runs them).
set(FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
set(RT_DIR ${CMAKE_SOURCE_DIR}/runtime)
set(FUZZ_HARNESSES frontend safetensors state shard hw manifest latest checksums state_meta tokenizer st_index)
# What each harness is built from besides its own file. The runtime's
# readers are compiled into the harness (not linked from shard_data and
# shard_rt_*), so that libFuzzer's coverage instrumentation reaches them
# without changing the libraries the rank programs link.
set(FUZZ_ERR_SOURCES ${RT_DIR}/base/util.c ${RT_DIR}/base/watchdog.c)
set(FUZZ_frontend_SOURCES)
set(FUZZ_frontend_LIBS shard_frontend shard_passes shard_ir)
set(FUZZ_safetensors_SOURCES ${RT_DIR}/safetensors/safetensors.c ${RT_DIR}/safetensors/st_check.c ${FUZZ_ERR_SOURCES})
set(FUZZ_safetensors_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_state_SOURCES ${RT_DIR}/safetensors/safetensors.c ${RT_DIR}/safetensors/st_check.c ${RT_DIR}/state/ckpt_state.c ${RT_DIR}/base/flags.c
    ${FUZZ_ERR_SOURCES})
set(FUZZ_state_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_shard_SOURCES ${RT_DIR}/data/data.c ${RT_DIR}/base/rng.c ${FUZZ_ERR_SOURCES})
set(FUZZ_shard_LIBS shard_ir m)
set(FUZZ_hw_SOURCES ${CMAKE_SOURCE_DIR}/planner/hw.c)
set(FUZZ_hw_LIBS shard_ir m)
set(FUZZ_manifest_SOURCES ${CMAKE_SOURCE_DIR}/driver/launch_script.c)
set(FUZZ_manifest_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_latest_SOURCES ${RT_DIR}/state/ckpt_keep.c ${RT_DIR}/safetensors/safetensors_write.c ${RT_DIR}/safetensors/st_check.c
    ${FUZZ_ERR_SOURCES})
set(FUZZ_latest_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_checksums_SOURCES ${RT_DIR}/safetensors/safetensors.c ${RT_DIR}/safetensors/st_check.c ${FUZZ_ERR_SOURCES})
set(FUZZ_checksums_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_state_meta_SOURCES ${RT_DIR}/safetensors/safetensors.c ${RT_DIR}/safetensors/st_check.c ${RT_DIR}/state/ckpt_state.c
    ${RT_DIR}/base/flags.c ${FUZZ_ERR_SOURCES})
set(FUZZ_state_meta_LIBS PkgConfig::CJSON shard_ir m)
# The tokenizer's sources, not shard_tokenizer: libFuzzer's coverage must
# reach them.
set(TOK_DIR ${CMAKE_SOURCE_DIR}/tokenizer)
set(FUZZ_tokenizer_SOURCES ${TOK_DIR}/bpe.c ${TOK_DIR}/load.c ${TOK_DIR}/pretok.c ${TOK_DIR}/train.c)
set(FUZZ_tokenizer_LIBS PkgConfig::CJSON shard_ir m)
set(FUZZ_st_index_SOURCES ${RT_DIR}/safetensors/safetensors.c ${RT_DIR}/safetensors/st_check.c ${FUZZ_ERR_SOURCES})
set(FUZZ_st_index_LIBS PkgConfig::CJSON shard_ir m)

option(SHARDC_FUZZ "Build the libFuzzer targets fuzz_NAME (clang only)" ON)
set(FUZZ_LIBFUZZER OFF)
if(SHARDC_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(FUZZ_LIBFUZZER ON)
  # libFuzzer steers by coverage of the code under test, so the compiler's
  # libraries get the coverage instrumentation (no fuzzer main: shardc and
  # the other tests link them as usual).
  foreach(lib shard_ir shard_frontend shard_passes)
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
    target_link_options(${lib} INTERFACE -fsanitize=fuzzer-no-link)
  endforeach()
endif()

file(GLOB_RECURSE FUZZ_CORPUS_FILES CONFIGURE_DEPENDS ${FUZZ_DIR}/corpus/*)
foreach(h ${FUZZ_HARNESSES})
  set(src ${FUZZ_DIR}/fuzz_${h}.c ${FUZZ_${h}_SOURCES})
  add_executable(fuzz_replay_${h} ${FUZZ_DIR}/replay.c ${src})
  target_include_directories(fuzz_replay_${h} PRIVATE ${SHARD_RT_INCLUDE_DIRS} ${CMAKE_SOURCE_DIR}/planner)
  target_link_libraries(fuzz_replay_${h} PRIVATE ${FUZZ_${h}_LIBS})
  set_target_properties(fuzz_replay_${h} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                        ${CMAKE_BINARY_DIR}/fuzz)
  add_test(NAME fuzz.corpus_replay_${h} COMMAND fuzz_replay_${h} ${FUZZ_DIR}/corpus)
  set_tests_properties(fuzz.corpus_replay_${h} PROPERTIES TIMEOUT 600)
  if(FUZZ_LIBFUZZER)
    add_executable(fuzz_${h} ${src})
    target_include_directories(fuzz_${h} PRIVATE ${SHARD_RT_INCLUDE_DIRS} ${CMAKE_SOURCE_DIR}/planner)
    target_compile_options(fuzz_${h} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${h} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${h} PRIVATE ${FUZZ_${h}_LIBS})
    set_target_properties(fuzz_${h} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    # The libFuzzer binary replays every corpus too (files given, not a
    # directory: each runs once and nothing new is explored).
    add_test(NAME fuzz.libfuzzer_replay_${h} COMMAND fuzz_${h} ${FUZZ_CORPUS_FILES})
    set_tests_properties(fuzz.libfuzzer_replay_${h} PROPERTIES TIMEOUT 600)
  endif()
endforeach()
