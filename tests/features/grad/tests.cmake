# Finite-difference checks of the autodiff pass: gradcheck interprets the
# IR that `shardc compile --passes=...,autodiff` prints, in f64 with the CPU
# kernels, and compares every parameter's gradient with central differences
# of the loss. Independent of codegen: a failure here is an adjoint (or an
# op semantics) bug.
set(GRAD_DIR ${CMAKE_CURRENT_LIST_DIR})
add_executable(gradcheck ${GRAD_DIR}/gradcheck.c)
target_link_libraries(gradcheck PRIVATE shard_test_interp)

# grad_test(NAME INPUT ARGS...): compile INPUT with ARGS through autodiff,
# then check the gradients of what it printed. grad_test_passes takes the
# pipeline first (one that ends in passes after autodiff, which must keep
# the gradients).
function(grad_test_passes name passes input)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/grad-${name}.ir)
  string(REPLACE ";" " " args "${ARGN}")
  add_test(NAME grad/${name}
           COMMAND sh -c "\"$1\" compile \"$2\" $3 --passes=$6 --emit-ir > \"$4\" && \"$5\" \"$4\""
                   sh ${SHARDC} ${input} "${args}" ${out} $<TARGET_FILE:gradcheck> ${passes})
endfunction()
function(grad_test name input)
  grad_test_passes(${name} fold,shape,unroll,autodiff,verify ${input} ${ARGN})
endfunction()

grad_test(gpt2 ${MODELS_DIR}/gpt2.shard -D vocab=19 -D seq=5 -D hidden=8 -D heads=2 -D layers=2
          -D batch=2 -D dropout_rate=0.25)
grad_test(llama ${MODELS_DIR}/llama.shard -D vocab=19 -D seq=5 -D hidden=16 -D heads=4
          -D kv_heads=2 -D ffn=12 -D layers=2 -D batch=2)
grad_test(gpt3 ${MODELS_DIR}/gpt3.shard -D vocab=11 -D seq=4 -D hidden=6 -D heads=3 -D layers=1)
grad_test(ops ${TESTS_DIR}/passes/autodiff_ops.ir)
grad_test(tied ${TESTS_DIR}/passes/autodiff_tied.ir)
grad_test(matmul ${GRAD_DIR}/matmul.ir)
# slice, unequal concat, partial rope and the exact GELU (issue 23's ops).
grad_test(issue23_ops ${GRAD_DIR}/issue23_ops.ir)
# GPT-NeoX: parallel residual, rope over 2 of each head's 8 dims, exact GELU.
grad_test(neox ${MODELS_DIR}/neox.shard -D vocab=19 -D seq=5 -D hidden=16 -D heads=2 -D layers=2
          -D batch=2 -D init_std=0.3)
# Bidirectional attention with a key-padding mask and cross_entropy with
# ignored targets (BERT's masked-LM ops).
grad_test(bert_ops ${GRAD_DIR}/bert_ops.ir)
# BERT: post-LN layers, the padding mask, exact GELU, the tied MLM decoder.
grad_test(bert ${MODELS_DIR}/bert.shard -D vocab=19 -D seq=5 -D hidden=16 -D heads=2 -D layers=2
          -D batch=2 -D init_std=0.3)
# The fused residual adds and norms (add_layernorm, add_rmsnorm): their
# adjoints, and the pass add-norm after autodiff on GPT-2 (layernorm) and
# LLaMA (rmsnorm), forward and backward rewritten.
grad_test(add_norm ${GRAD_DIR}/add_norm.ir)
grad_test_passes(gpt2_add_norm fold,shape,unroll,autodiff,add-norm,verify ${MODELS_DIR}/gpt2.shard
                 -D vocab=19 -D seq=5 -D hidden=8 -D heads=2 -D layers=2 -D batch=2)
grad_test_passes(llama_add_norm fold,shape,unroll,autodiff,add-norm,verify
                 ${MODELS_DIR}/llama.shard -D vocab=19 -D seq=5 -D hidden=16 -D heads=4
                 -D kv_heads=2 -D ffn=12 -D layers=2 -D batch=2)
# The routed layer's ops (router, moe_dispatch, grouped_linear, moe_combine).
grad_test(moe_ops ${GRAD_DIR}/moe_ops.ir)
# The routed models: router, dispatch, grouped experts, combine, the
# load-balancing loss and DeepSeek-MoE's z-loss (the coefficients raised so
# that their gradients show).
grad_test(mixtral ${MODELS_DIR}/mixtral.shard -D vocab=19 -D seq=5 -D hidden=16 -D heads=4
          -D kv_heads=2 -D ffn=12 -D experts=4 -D layers=2 -D batch=2 -D init_std=0.3
          -D router_aux_loss_coef=0.5)
grad_test(deepseek_moe ${MODELS_DIR}/deepseek_moe.shard -D vocab=19 -D seq=5 -D hidden=16
          -D heads=2 -D kv_heads=2 -D experts=6 -D top_k=3 -D expert_ffn=6 -D layers=2 -D batch=2
          -D init_std=0.3 -D aux_loss_alpha=0.5 -D z_loss_coef=0.5)
# The same with capacity factors that drop copies.
grad_test(moe_capacity ${GRAD_DIR}/moe_capacity.ir)
