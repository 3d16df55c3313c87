# Pass tests: text in, text out.
#
# Each tests/passes/NAME.ir is an IR module whose first lines say how to run
# it:
#   // RUN: FLAGS     appended to `shardc compile NAME.ir`
#   // EXIT: STATUS   the expected exit status (0 when absent)
# and NAME.expected holds everything shardc prints (stdout and stderr).
# The cases at the end run the models of models/ instead of an .ir file.
# After a deliberate change, regenerate with
#   UPDATE=1 ctest -R '^passes/' && git diff tests/passes
# and read every changed line before keeping it.
set(PASSES_DIR ${TESTS_DIR}/passes)

file(GLOB PASSES_INPUTS CONFIGURE_DEPENDS ${PASSES_DIR}/*.ir)
foreach(input ${PASSES_INPUTS})
  get_filename_component(name ${input} NAME_WE)
  file(STRINGS ${input} run_line REGEX "^// RUN:")
  file(STRINGS ${input} exit_line REGEX "^// EXIT:")
  if(NOT run_line)
    message(FATAL_ERROR "${input} has no `// RUN:` line")
  endif()
  string(REGEX REPLACE "^// RUN:[ ]*" "" flags "${run_line}")
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(status 0)
  if(exit_line)
    string(REGEX REPLACE "^// EXIT:[ ]*" "" status "${exit_line}")
  endif()
  add_test(NAME passes/${name}
           COMMAND ${EXPECT} ${PASSES_DIR}/${name}.expected ${status} --cd ${PASSES_DIR}
                   -- ${SHARDC} compile ${name}.ir ${flags})
endforeach()

# passes_model_test(NAME STATUS ARGS...): `shardc compile ARGS...` run in
# tests/passes, so the models are ../../models/*.shard in the messages.
function(passes_model_test name status)
  add_test(NAME passes/${name}
           COMMAND ${EXPECT} ${PASSES_DIR}/${name}.expected ${status} --cd ${PASSES_DIR}
                   -- ${SHARDC} compile ${ARGN})
endfunction()

passes_model_test(model_gpt2 0 ../../models/gpt2.shard --emit-ir)
passes_model_test(model_llama 0 ../../models/llama.shard --emit-ir)
passes_model_test(model_llama_gqa 0 ../../models/llama.shard -D kv_heads=8 --emit-ir)
passes_model_test(model_gpt3_1t 0 ../../models/gpt3.shard -D layers=128 -D hidden=25600
                  -D heads=160 --emit-ir)
passes_model_test(model_override_missing 1 ../../models/gpt2.shard -D hiddne=5)
passes_model_test(model_gpt2_hidden_770 1 ../../models/gpt2.shard -D hidden=770)
passes_model_test(model_llama_hidden_770 1 ../../models/llama.shard -D hidden=770)

# unroll and autodiff on the bundled models at tiny sizes, so that every
# line of the golden output can be read (and was: each adjoint checked).
set(TINY_GPT2 -D vocab=64 -D seq=8 -D hidden=16 -D heads=2)
set(TINY_LLAMA -D vocab=64 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2 -D ffn=48)
passes_model_test(unroll_gpt2 0 ../../models/gpt2.shard ${TINY_GPT2} -D layers=2
                  --passes=fold,shape,unroll,verify --emit-ir)
passes_model_test(autodiff_gpt2 0 ../../models/gpt2.shard ${TINY_GPT2} -D layers=1
                  --passes=fold,shape,unroll,autodiff,verify --emit-ir)
passes_model_test(autodiff_llama 0 ../../models/llama.shard ${TINY_LLAMA} -D layers=1
                  --passes=fold,shape,unroll,autodiff,verify --emit-ir)
passes_model_test(err_autodiff_model_rolled 1 ../../models/gpt2.shard
                  --passes=fold,shape,autodiff)

# The backward graph is ordinary IR: what autodiff prints reads back and
# prints the same (dropout with a rate, so dropout_grad is in it too), and
# the verifier accepts it after a parse.
foreach(model gpt2 llama)
  if(model STREQUAL gpt2)
    set(defs ${TINY_GPT2} -D layers=2 -D dropout_rate=0.1)
  else()
    set(defs ${TINY_LLAMA} -D layers=2)
  endif()
  string(REPLACE ";" " " defs "${defs}")
  set(out ${CMAKE_CURRENT_BINARY_DIR}/autodiff-${model}.ir)
  add_test(NAME passes/autodiff_roundtrip_${model}
           COMMAND sh -c "\"$1\" compile \"$2\" $3 --passes=fold,shape,unroll,autodiff,verify --emit-ir > \"$4\" && \"$1\" compile \"$4\" --passes=verify --emit-ir | diff -u \"$4\" - && echo \"$2: autodiff IR round trip identical\""
                   sh ${SHARDC} ${MODELS_DIR}/${model}.shard ${defs} ${out})
endforeach()

# unroll moves every layer's parameters to the top level: the parameter
# count `shardc info` reports must not change, for every bundled model.
add_test(NAME passes/unroll_param_count
         COMMAND bash ${PASSES_DIR}/param_count.sh ${MODELS_DIR})

# Codegen runs no pass: a target's programs need what the program passes
# make, and a pipeline (--passes) that leaves one out is an error naming it.
set(PASSES_PP_TINY ../../models/gpt2.shard ${TINY_GPT2} -D layers=2 --pp 2 --target cpu)
passes_model_test(err_target_no_memplan 1 ${PASSES_PP_TINY} -o ${CMAKE_CURRENT_BINARY_DIR}/no-memplan
                  --passes=fold,shape,unroll,pp-partition,autodiff,pp-split,schedule)
passes_model_test(err_target_no_schedule 1 ${PASSES_PP_TINY} -o ${CMAKE_CURRENT_BINARY_DIR}/no-schedule
                  --passes=fold,shape,unroll,pp-partition,autodiff,pp-split,memplan)
passes_model_test(err_target_no_pp_split 1 ${PASSES_PP_TINY} -o ${CMAKE_CURRENT_BINARY_DIR}/no-split
                  --passes=fold,shape,unroll,pp-partition,autodiff,memplan)
# The CUDA target's programs read the GEMM epilogues its own pipeline
# chooses after memplan.
passes_model_test(err_target_no_gemm_epilogue 1 ../../models/gpt2.shard ${TINY_GPT2} -D layers=2
                  --target cuda -o ${CMAKE_CURRENT_BINARY_DIR}/no-epilogues
                  --passes=fold,shape,unroll,autodiff,schedule,memplan)

# The memory plan's first-fit against the plain scan it replaced, and its
# time on 10,000 layers' buffers (memplan_fit.c says what it covers).
add_executable(memplan_fit_test ${PASSES_DIR}/memplan_fit.c)
target_include_directories(memplan_fit_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(memplan_fit_test PRIVATE shard_passes shard_ir m)
add_test(NAME passes/memplan_fit COMMAND memplan_fit_test)
