# Pipeline partition on the compiler side: placement of layers on p stages x
# v chunks (even, balanced by cost, --pp-layout), pp_boundary messages and
# their adjoints, the tied embedding's copy, the verifier's
# stage rules, and every placement error. Golden outputs regenerate with
#   UPDATE=1 ctest -R '^pp/' && git diff tests/features/pp
# (read every changed line before keeping it).
set(PP_DIR ${CMAKE_CURRENT_LIST_DIR})
set(PP_GPT2 ../../../models/gpt2.shard -D vocab=65 -D seq=8 -D hidden=16 -D heads=2 --vocab-multiple 8)
set(PP_LLAMA ../../../models/llama.shard -D vocab=65 -D seq=8 -D hidden=32 -D heads=4 -D kv_heads=2
    -D ffn=48 --vocab-multiple 8)

function(pp_test name status)
  add_test(NAME pp/${name}
           COMMAND ${EXPECT} ${PP_DIR}/${name}.expected ${status} --cd ${PP_DIR}
                   -- ${SHARDC} compile ${ARGN})
endfunction()

# GPT-2 with 5 layers on 2 stages: 5 is not a multiple of 2, so the split
# is by cost: 3 layers + embedding, then 2 layers + the output layer.
# Forward and backward IR, one message each way, the tied wte copied.
pp_test(gpt2_p2 0 ${PP_GPT2} -D layers=5 --pp 2 --verify-each --emit-ir --report pp)
# The same on 2 stages x 2 chunks with an explicit layout.
pp_test(gpt2_p2v2_layout 0 ${PP_GPT2} -D layers=5 --pp 2 --vpp 2 --pp-layout 1,2,1,1 --verify-each
        --emit-ir --report pp)
# LLaMA (untied output layer) on 3 stages, 5 layers balanced by cost.
pp_test(llama_p3 0 ${PP_LLAMA} -D layers=5 --pp 3 --verify-each --emit-ir --report pp)
# Megatron-LM's interleaved placement: p=4, v=2, 16 layers: stage 1 holds 2,3 and 10,11.
pp_test(placement_p4v2 0 ${PP_GPT2} -D layers=16 --pp 4 --vpp 2 --report pp)
# zb-v's V placement: stage 1 holds 2,3 and 12,13; stage 0 holds both ends
# and both copies of the tied wte, whose gradients it sums itself.
pp_test(placement_p4v2_zbv 0 ${PP_GPT2} -D layers=16 --pp 4 --vpp 2 --schedule zb-v --report pp)
# A layout may leave the first and last virtual stage without layers.
pp_test(layout_empty_ends 0 ${PP_GPT2} -D layers=5 --pp 3 --pp-layout 0,5,0 --report pp)

# Boundary and all-reduce counts over several (p, v, l), and the round trip
# of the printed partitioned IR.
add_test(NAME pp/counts COMMAND bash ${PP_DIR}/counts.sh ${PP_DIR}/../../../models)

# Errors.
pp_test(err_few_layers 1 ${PP_GPT2} -D layers=5 --pp 3 --vpp 2)
pp_test(err_few_layers_no_layout 1 ${PP_GPT2} -D layers=5 --pp 4 --vpp 2)
pp_test(err_layout_syntax 1 ${PP_GPT2} -D layers=5 --pp 2 --pp-layout 3:2)
pp_test(err_layout_sum 1 ${PP_GPT2} -D layers=5 --pp 2 --pp-layout 3,1)
pp_test(err_layout_count 1 ${PP_GPT2} -D layers=5 --pp 2 --pp-layout 2,2,1)
pp_test(err_layout_empty_middle 1 ${PP_GPT2} -D layers=5 --pp 2 --vpp 2 --pp-layout 2,0,3,0)
pp_test(err_shared_param 1 shared.shard --pp 3)
pp_test(err_rolled 1 ${PP_GPT2} --pp 2 --passes=fold,shape,pp-partition)
pp_test(err_after_autodiff 1 ${PP_GPT2} -D layers=2 --pp 2 --passes=fold,shape,unroll,autodiff,pp-partition)
# What the target refuses, before writing anything.
pp_test(err_target_vpp 1 ${PP_GPT2} -D layers=4 --vpp 2 --target cpu -o unused)
pp_test(err_target_zero 1 ${PP_GPT2} -D layers=4 --zero 1 --target cpu -o unused)
pp_test(err_target_schedule 1 ${PP_GPT2} -D layers=4 --pp 2 --schedule zigzag --target cpu -o unused)
pp_test(err_target_interleaved 1 ${PP_GPT2} -D layers=4 --pp 2 --schedule interleaved --target cpu
        -o unused)
pp_test(err_target_batch 1 ${PP_GPT2} -D layers=4 --pp 2 --dp 2 --global-batch 3 --target cpu -o unused)
pp_test(err_verify_cross 1 cross.ir --passes=shape,verify)
# Scatter/gather: messages of 1/t slices all-gathered on arrival, the
# gradient's the same way back, 1/t of the pipeline bytes in the comm report.
add_test(NAME pp/scatter_gather COMMAND bash ${PP_DIR}/scatter_gather.sh)
