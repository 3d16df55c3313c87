# Tensor and sequence parallelism on the compiler side: the partitioned IR
# (golden, text out), the collectives one layer adds (counted), the comm
# report against the formula in docs/parallelism.md, model annotations, and every
# configuration error. Golden outputs regenerate with
#   UPDATE=1 ctest -R '^tp/' && git diff tests/features/tp
# (read every changed line before keeping it).
set(TP_DIR ${CMAKE_CURRENT_LIST_DIR})
set(TP_PASSES fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,unroll,autodiff,tp-fuse,verify)
set(TP_FORWARD fold,shape,tp-annotate,vocab-pad,tp-partition,tp-fuse,verify)
# A vocabulary of 65 is padded to 80 at t = 2 (--vocab-multiple 8: 16 * 5).
set(TP_GPT2 ../../../models/gpt2.shard -D vocab=65 -D seq=8 -D hidden=16 -D heads=2 -D layers=1
    --vocab-multiple 8)
set(TP_LLAMA ../../../models/llama.shard -D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2
    -D ffn=48 -D layers=1 --vocab-multiple 8)

# tp_test(NAME STATUS ARGS...): `shardc compile ARGS...` in tests/features/tp against
# NAME.expected.
function(tp_test name status)
  add_test(NAME tp/${name}
           COMMAND ${EXPECT} ${TP_DIR}/${name}.expected ${status} --cd ${TP_DIR}
                   -- ${SHARDC} compile ${ARGN})
endfunction()

# One sharded GPT-2 layer at t = 2, forward and backward: two all-reduces
# in the layer's forward and two in its backward (one more each for the
# embedding and the output layer).
tp_test(gpt2_t2 0 ${TP_GPT2} --tp 2 --passes=${TP_PASSES} --emit-ir)
# The same with sequence parallelism: all-gather / reduce-scatter pairs.
tp_test(gpt2_t2_sp 0 ${TP_GPT2} --tp 2 --sequence-parallel --passes=${TP_PASSES} --emit-ir)
# LLaMA with grouped-query attention: 4 heads and 2 kv heads over 2 ranks.
tp_test(llama_gqa_t2 0 ${TP_LLAMA} --tp 2 --passes=${TP_PASSES} --emit-ir)
tp_test(llama_gqa_t2_sp 0 ${TP_LLAMA} --tp 2 --sequence-parallel --passes=${TP_PASSES} --emit-ir)
# The comm report, per collective and mesh axis.
tp_test(comm_gpt2_t2 0 ${TP_GPT2} --tp 2 --report comm)
tp_test(comm_gpt2_t4_sp 0 ${TP_GPT2} -D heads=4 --tp 4 --sequence-parallel --report comm)
# --precision bf16: activations and pipeline messages at half the bytes,
# the gradient reductions and the loss statistics unchanged (comm_bf16.sh;
# emu/comm_bf16 runs the same programs against the runtime's counters).
add_test(NAME tp/comm_bf16 COMMAND bash ${TP_DIR}/comm_bf16.sh report)

# Model annotations: the megatron plan of a small model, the same model
# with one weight annotated `replicated` (its MLP pair stays whole), and a
# plan of the model's own under --tp-strategy none.
tp_test(mlp_megatron 0 mlp.shard --tp 2 --vocab-multiple 4 --passes=${TP_FORWARD} --emit-ir)
tp_test(mlp_fc_replicated 0 mlp_fc_replicated.shard --tp 2 --vocab-multiple 4
        --passes=${TP_FORWARD} --emit-ir)
tp_test(mlp_user_split 0 mlp_user_split.shard --tp 2 --tp-strategy none --vocab-multiple 4
        --passes=${TP_FORWARD} --emit-ir)
# A weight split in blocks whose bias and result are needed replicated:
# sliced and gathered block by block.
tp_test(blocks 0 blocks.shard --tp 2 --tp-strategy none --passes=${TP_FORWARD} --emit-ir)
# Annotations print and parse back (replicated(tensor) included).
tp_test(mlp_annotations_ir 0 mlp_fc_replicated.shard --emit-ir)
# tp-fuse alone, text in and out.
tp_test(tp_fuse 0 tp_fuse.ir --passes=shape,tp-fuse,verify --emit-ir)

# Errors: each constraint, named with its values.
tp_test(err_heads 1 ${TP_GPT2} --tp 4)
tp_test(err_kv_heads 1 ${TP_LLAMA} --tp 4)
tp_test(err_hidden 1 ${TP_GPT2} -D hidden=18 --tp 4)
tp_test(err_ffn 1 ${TP_GPT2} -D ffn=63 --tp 2)
tp_test(err_vocab 1 ${TP_GPT2} --tp 2 --vocab-multiple 0)
tp_test(err_seq_sp 1 ${TP_GPT2} -D seq=9 --tp 2 --sequence-parallel)
tp_test(err_world_size 1 ${TP_GPT2} --tp 2 --world-size 3)
tp_test(err_tp_flag 1 ${TP_GPT2} --tp 0)
tp_test(err_strategy_flag 1 ${TP_GPT2} --tp 2 --tp-strategy zigzag)
tp_test(err_report_flag 1 ${TP_GPT2} --report memory)
tp_test(err_annotations 1 err_annotations.shard)
tp_test(err_call 1 err_call.shard)
tp_test(err_partition_twice 1 ${TP_GPT2} --tp 2
        --passes=fold,shape,tp-annotate,vocab-pad,tp-partition,tp-partition)
tp_test(err_partition_after_autodiff 1 ${TP_GPT2} --tp 2
        --passes=fold,shape,unroll,autodiff,tp-partition)

# Collectives per layer, counted: the difference between two layers and one.
add_test(NAME tp/layer_counts_gpt2
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 2 2 all_gather 0 0 reduce_scatter 0 0" ${TP_GPT2} --tp 2)
add_test(NAME tp/layer_counts_gpt2_sp
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 0 6 all_gather 2 2 reduce_scatter 2 2" ${TP_GPT2} --tp 2
                 --sequence-parallel)
add_test(NAME tp/layer_counts_llama
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 2 2 all_gather 0 0 reduce_scatter 0 0" ${TP_LLAMA} --tp 2)
add_test(NAME tp/layer_counts_llama_sp
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 0 2 all_gather 2 2 reduce_scatter 2 2" ${TP_LLAMA} --tp 2
                 --sequence-parallel)
foreach(test IN ITEMS layer_counts_gpt2 layer_counts_gpt2_sp layer_counts_llama
                      layer_counts_llama_sp)
  set_tests_properties(tp/${test} PROPERTIES WORKING_DIRECTORY ${TP_DIR})
endforeach()

# The comm report's per-layer numbers against 8*b*s*h*(t-1)/t.
foreach(t 2 4)
  add_test(NAME tp/comm_formula_t${t}
           COMMAND bash ${TP_DIR}/comm_formula.sh 2 8 16 ${t} --
                   ${MODELS_DIR}/gpt2.shard -D vocab=64 -D heads=4)
  add_test(NAME tp/comm_formula_t${t}_sp
           COMMAND bash ${TP_DIR}/comm_formula.sh 2 8 16 ${t} --sequence-parallel --
                   ${MODELS_DIR}/gpt2.shard -D vocab=64 -D heads=4)
endforeach()

# The partitioned IR is ordinary IR: it prints, parses and prints the same,
# and the verifier accepts it after a parse.
foreach(case gpt2 gpt2_sp llama)
  if(case STREQUAL llama)
    set(args ${TP_LLAMA})
  else()
    set(args ${TP_GPT2})
  endif()
  if(case STREQUAL gpt2_sp)
    list(APPEND args --sequence-parallel)
  endif()
  string(REPLACE ";" " " args "${args}")
  set(out ${CMAKE_CURRENT_BINARY_DIR}/tp-${case}.ir)
  add_test(NAME tp/roundtrip_${case}
           COMMAND sh -c "cd \"$1\" && \"$2\" compile $3 --tp 2 --passes=${TP_PASSES} --emit-ir > \"$4\" && \"$2\" compile \"$4\" --passes=verify --emit-ir | diff -u \"$4\" - && echo \"tp $5: partitioned IR round trip identical\""
                   sh ${TP_DIR} ${SHARDC} "${args}" ${out} ${case})
endforeach()

# With t = 1 the tensor-parallel passes change nothing: the CPU target's
# pipeline prints what the single-rank pipeline printed.
foreach(model gpt2 llama)
  set(defs "-D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D layers=2 -D ffn=48")
  if(model STREQUAL llama)
    set(defs "${defs} -D kv_heads=2")
  endif()
  add_test(NAME tp/t1_unchanged_${model}
           COMMAND sh -c "\"$1\" compile \"$2\" $4 --tp 1 --sequence-parallel --passes=${TP_PASSES} --emit-ir > \"$3.tp\" && \"$1\" compile \"$2\" $4 --passes=fold,shape,unroll,autodiff,verify --emit-ir > \"$3\" && diff -u \"$3\" \"$3.tp\" && echo \"$2: t = 1 partitions nothing\""
                   sh ${SHARDC} ${MODELS_DIR}/${model}.shard
                   ${CMAKE_CURRENT_BINARY_DIR}/tp-t1-${model}.ir "${defs}")
endforeach()

# Numerics without codegen: tpsim interprets the one-rank program and the t
# ranks of the partitioned one in lockstep (f64, the CPU kernels, the
# collectives across the simulated ranks) and compares the loss and every
# gradient. GPT-2 and LLaMA (GQA) at tiny odd shapes, a vocabulary that
# needs padding, t = 2 and 4, with and without sequence parallelism, and the
# plans of the annotated models.
add_executable(tpsim ${TP_DIR}/tpsim.c)
target_link_libraries(tpsim PRIVATE shard_test_interp)
function(tpsim_test name model t)
  string(REPLACE ";" " " args "${ARGN}")
  set(ref ${CMAKE_CURRENT_BINARY_DIR}/tpsim-${name}-ref.ir)
  set(part ${CMAKE_CURRENT_BINARY_DIR}/tpsim-${name}.ir)
  add_test(NAME tp/sim_${name}
           COMMAND sh -c "\"$1\" compile \"$2\" $3 --passes=${TP_PASSES} --emit-ir > \"$5\" && \"$1\" compile \"$2\" $3 --tp $4 --passes=${TP_PASSES} --emit-ir > \"$6\" && \"$7\" \"$5\" \"$6\""
                   sh ${SHARDC} ${model} "${args}" ${t} ${ref} ${part} $<TARGET_FILE:tpsim>)
endfunction()
set(SIM_GPT2 -D vocab=67 -D seq=8 -D hidden=16 -D heads=4 -D layers=2 -D batch=2 --vocab-multiple 4)
set(SIM_LLAMA -D vocab=67 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=4 -D ffn=40 -D layers=2
    -D batch=2 --vocab-multiple 4)
foreach(t 2 4)
  tpsim_test(gpt2_t${t} ${MODELS_DIR}/gpt2.shard ${t} ${SIM_GPT2})
  tpsim_test(gpt2_t${t}_sp ${MODELS_DIR}/gpt2.shard ${t} ${SIM_GPT2} --sequence-parallel)
  tpsim_test(llama_t${t} ${MODELS_DIR}/llama.shard ${t} ${SIM_LLAMA})
  tpsim_test(llama_t${t}_sp ${MODELS_DIR}/llama.shard ${t} ${SIM_LLAMA} --sequence-parallel)
endforeach()
# Dropout in replicated regions draws one shared stream: the same masks as
# one rank's.
tpsim_test(gpt2_t2_dropout ${MODELS_DIR}/gpt2.shard 2 ${SIM_GPT2} -D dropout_rate=0.25)
tpsim_test(llama_gqa_t2 ${MODELS_DIR}/llama.shard 2 ${SIM_LLAMA} -D kv_heads=2)
tpsim_test(llama_gqa_t2_sp ${MODELS_DIR}/llama.shard 2 ${SIM_LLAMA} -D kv_heads=2
           --sequence-parallel)
tpsim_test(gpt3_t2 ${MODELS_DIR}/gpt3.shard 2 -D vocab=11 -D seq=4 -D hidden=6 -D heads=2
           -D layers=1 --vocab-multiple 2)
tpsim_test(mlp_megatron ${TP_DIR}/mlp.shard 2 --vocab-multiple 4)
tpsim_test(mlp_fc_replicated ${TP_DIR}/mlp_fc_replicated.shard 2 --vocab-multiple 4)
tpsim_test(mlp_user_split ${TP_DIR}/mlp_user_split.shard 2 --tp-strategy none)
tpsim_test(blocks ${TP_DIR}/blocks.shard 2 --tp-strategy none)
tpsim_test(tied_hidden ${TP_DIR}/tied_hidden.shard 2 --tp-strategy none)

# What the Megatron strategy did (--report tp): every GEMM with a parameter
# weight, split or replicated with the reason; each one left replicated is
# also a warning. The parallel-residual model's q/k/v pass through reshapes
# that keep the heads whole, so attention is split by heads.
tp_test(report_parallel_residual 0 parallel_residual.shard --tp 2 --vocab-multiple 1 --report tp)
tp_test(report_replicated 0 replicated_gemm.shard --tp 2 --vocab-multiple 4 --report tp)
# A reshape that moves elements between ranks ends the block, named.
tp_test(report_reshape_cut 0 reshape_cut.shard --tp 2 --vocab-multiple 4 --report tp)
# The parallel residual x + attn(ln_1 x) + mlp(ln_2 x): one all-reduce per
# layer forward (the two row-parallel partial sums added first), and in the
# backward one per column-parallel input (ln_1 x and ln_2 x), as Megatron's.
add_test(NAME tp/layer_counts_parallel_residual
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 1 2 all_gather 0 0 reduce_scatter 0 0" ${TP_DIR}/parallel_residual.shard
                 --tp 2 --vocab-multiple 1)
add_test(NAME tp/layer_counts_parallel_residual_sp
         COMMAND bash ${TP_DIR}/layer_counts.sh
                 "all_reduce 0 6 all_gather 2 1 reduce_scatter 1 2" ${TP_DIR}/parallel_residual.shard
                 --tp 2 --vocab-multiple 1 --sequence-parallel)
