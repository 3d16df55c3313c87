# Memory plan and CPU code generation. cgtool (cgtool.c) runs the CPU
# pipeline, then either checks the plan by replaying liveness (`check`) or
# writes the rank program (`compile`); run.sh builds and runs what it wrote.
# Every test prints the numbers it checks.
set(CG_TESTS_DIR ${TESTS_DIR}/codegen)
set(CG_WORK ${CMAKE_CURRENT_BINARY_DIR}/codegen)
add_executable(cgtool ${CG_TESTS_DIR}/cgtool.c)
target_link_libraries(cgtool PRIVATE shard_codegen shard_frontend shard_passes shard_ir)
set(CGTOOL $<TARGET_FILE:cgtool>)

# Every op of ops.def is written by the emitter core or by every target.
add_executable(op_coverage ${CG_TESTS_DIR}/op_coverage.c)
target_link_libraries(op_coverage PRIVATE shard_codegen shard_passes shard_ir)
add_test(NAME codegen/op_coverage COMMAND op_coverage)

# Small shapes of the shipped models: odd vocabulary, GQA for LLaMA.
set(CG_GPT2_TINY -D vocab=61 -D seq=16 -D hidden=32 -D heads=2 -D layers=2 -D batch=2)
set(CG_LLAMA_TINY -D vocab=61 -D seq=16 -D hidden=32 -D heads=4 -D kv_heads=2 -D layers=2
                  -D batch=2 -D ffn=48)
set(CG_FWD_ONLY --passes fold,shape,verify,memplan)

# The plan: bytes per region, then the replay of liveness.
function(cg_plan_test name dir model)
  add_test(NAME codegen/plan_${name}
           COMMAND ${EXPECT} ${CG_TESTS_DIR}/plan_${name}.expected 0 --cd ${dir}
                   -- ${CGTOOL} check ${model} ${ARGN})
endfunction()
cg_plan_test(gpt2_tiny ${MODELS_DIR} gpt2.shard ${CG_GPT2_TINY})
cg_plan_test(gpt2_tiny_f64 ${MODELS_DIR} gpt2.shard ${CG_GPT2_TINY} --f64)
cg_plan_test(gpt2_small_seq256 ${MODELS_DIR} gpt2.shard -D seq=256)
cg_plan_test(llama_tiny ${MODELS_DIR} llama.shard ${CG_LLAMA_TINY})
# The CUDA target's bf16 plans (--precision bf16): the step's values at 2
# bytes, weights and their gradients at 4; the replay checks them alike.
cg_plan_test(gpt2_tiny_bf16 ${MODELS_DIR} gpt2.shard ${CG_GPT2_TINY} --low-bytes 2)
cg_plan_test(llama_tiny_bf16 ${MODELS_DIR} llama.shard ${CG_LLAMA_TINY} --low-bytes 2)
cg_plan_test(elem ${CG_TESTS_DIR} elem.shard)
cg_plan_test(fwd_only ${CG_TESTS_DIR} fwd.shard ${CG_FWD_ONLY})
# The checker itself: a plan with two live buffers on the same bytes fails.
add_test(NAME codegen/plan_checker_catches_overlap
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/plan_checker_catches_overlap.expected 0
                 --cd ${MODELS_DIR} -- ${CGTOOL} check gpt2.shard --corrupt ${CG_GPT2_TINY})
add_test(NAME codegen/err_not_unrolled
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/err_not_unrolled.expected 1 --cd ${MODELS_DIR}
                 -- ${CGTOOL} check gpt2.shard --passes fold,shape,memplan)

# The generated program of a one-layer GPT-2, as text.
add_test(NAME codegen/golden_gpt2
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/golden_gpt2.expected 0 --cd ${MODELS_DIR}
                 -- ${CGTOOL} compile gpt2.shard ${CG_WORK}/golden --print -D vocab=61 -D seq=16
                    -D hidden=32 -D heads=2 -D layers=1 -D batch=2)

# Build and run: the program starts, its gradients match finite
# differences in f64, and an f32 build learns.
set(CG_RUN bash ${CG_TESTS_DIR}/run.sh ${CGTOOL} $<TARGET_FILE:rt_testtool>)
add_test(NAME codegen/run_fwd_only
         COMMAND ${CG_RUN} ${CG_WORK}/run_fwd ${CG_TESTS_DIR} fwd.shard start ${CG_FWD_ONLY})
add_test(NAME codegen/run_gradcheck_gpt2
         COMMAND ${CG_RUN} ${CG_WORK}/run_gc_gpt2 ${MODELS_DIR} gpt2.shard gradcheck ${CG_GPT2_TINY})
add_test(NAME codegen/run_gradcheck_gpt2_dropout
         COMMAND ${CG_RUN} ${CG_WORK}/run_gc_gpt2_dropout ${MODELS_DIR} gpt2.shard gradcheck
                 ${CG_GPT2_TINY} -D dropout_rate=0.1)
add_test(NAME codegen/run_gradcheck_llama
         COMMAND ${CG_RUN} ${CG_WORK}/run_gc_llama ${MODELS_DIR} llama.shard gradcheck ${CG_LLAMA_TINY})
add_test(NAME codegen/run_gradcheck_elem
         COMMAND ${CG_RUN} ${CG_WORK}/run_gc_elem ${CG_TESTS_DIR} elem.shard gradcheck)
add_test(NAME codegen/run_train_gpt2
         COMMAND ${CG_RUN} ${CG_WORK}/run_train_gpt2 ${MODELS_DIR} gpt2.shard train ${CG_GPT2_TINY})
add_test(NAME codegen/err_unsupported_model
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/err_unsupported_model.expected 1 --cd ${CG_TESTS_DIR}
                 -- ${CGTOOL} compile err_loss.shard ${CG_WORK}/err ${CG_FWD_ONLY})
# An unknown target names the ones the table of targets has.
add_test(NAME codegen/err_unknown_target
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/err_unknown_target.expected 1 --cd ${MODELS_DIR}
                 -- ${SHARDC} compile gpt2.shard --target nosuch -o ${CG_WORK}/unknown)
# A target's own options come from the table of targets with their help:
# `compile --help` shows --cuda-arch as codegen/cuda/target.c writes it,
# and a typo of it is answered with the name.
add_test(NAME codegen/target_option_help
         COMMAND ${EXPECT} ${CG_TESTS_DIR}/target_option_help.expected 0 --cd ${MODELS_DIR}
                 -- sh -c "\"$0\" compile --help | grep -e '--cuda-arch' && \"$0\" compile gpt2.shard --cuda-ach sm_80 2>&1 | head -1"
                    ${SHARDC})
