# The PyTorch oracle checked on its own, without our compiler: parameter
# counts, autograd against finite differences in f64, the rope, attention
# and file-format conventions, and oracle.py and compare.py end to end.
# Debian's python3-torch is a package of the system python, so the test runs
# /usr/bin/python3 rather than whatever python3 is first on PATH; without
# torch it exits 77 and counts as skipped.
add_test(NAME oracle_selftest COMMAND /usr/bin/python3 ${TESTS_DIR}/features/oracle/selftest.py)
set_tests_properties(oracle_selftest PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS oracle)

# Our compiled training programs against the oracle (e2e.sh): GPT-2 with odd
# sizes and a tiny GQA LLaMA, 10 AdamW steps on both sides from the same
# initial weights and data. The f32 tests hold the issue's tolerances; the
# f64 ones hold 1e-10, where a difference of convention cannot hide in the
# rounding noise. Skipped (77) without torch, with the reason printed.
foreach(model gpt2 llama)
  foreach(dtype f32 f64)
    if(dtype STREQUAL f32)
      set(name oracle.${model})
    else()
      set(name oracle.${model}_f64)
    endif()
    add_test(NAME ${name} COMMAND bash ${TESTS_DIR}/features/oracle/e2e.sh ${model})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT DTYPE=${dtype} SKIP_RETURN_CODE 77
                         TIMEOUT 300 LABELS oracle)
  endforeach()
endforeach()

# models/neox.shard, cheaply (default set, about 1 s of CPU): its parameter
# count, two steps against recorded losses, --tp 2 against one rank, and
# the partial rotary written with slices against rope's dims.
add_test(NAME oracle.models_cpu
         COMMAND bash ${TESTS_DIR}/features/oracle/models_cpu.sh ${SHARDC_DATA_DIR}/austen_train.bin)
set_tests_properties(oracle.models_cpu PROPERTIES TIMEOUT 120 LABELS oracle RESOURCE_LOCK mpirun)

# models/bert.shard against transformers' BertForMaskedLM (hf_bert.sh): the
# same masked-LM examples on both sides, 5 AdamW steps, 1e-5 in fp32 and
# 1e-10 in f64; long, for the import of transformers. Skipped (77) without it.
foreach(dtype f32 f64)
  if(dtype STREQUAL f32)
    set(name oracle.hf_bert)
  else()
    set(name oracle.hf_bert_f64)
  endif()
  add_test(NAME ${name} COMMAND bash ${TESTS_DIR}/features/oracle/hf_bert.sh)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT DTYPE=${dtype} SKIP_RETURN_CODE 77
                       TIMEOUT 300 LABELS oracle)
endforeach()

# models/bert.shard, cheaply (default set, about 1 s of CPU): its parameter
# count, two masked-LM steps against recorded losses, --tp 2 against one
# rank, and the padding mask's effect.
add_test(NAME oracle.bert_cpu
         COMMAND bash ${TESTS_DIR}/features/oracle/bert_cpu.sh ${SHARDC_DATA_DIR}/austen_train.bin)
set_tests_properties(oracle.bert_cpu PROPERTIES TIMEOUT 120 LABELS oracle RESOURCE_LOCK mpirun)

# Against Hugging Face transformers' own classes (hf_models.sh): same
# weights in, 5 AdamW steps on both sides, losses within 1e-5 in fp32 and
# 1e-10 in f64 (oracle.hf_neox_f64). Importing transformers alone takes
# seconds, so both are in the `long` label. Skipped (77), with the reason
# printed, without transformers in build/pyenv.
foreach(model neox)
  foreach(dtype f32 f64)
    if(dtype STREQUAL f32)
      set(name oracle.hf_${model})
    else()
      set(name oracle.hf_${model}_f64)
    endif()
    add_test(NAME ${name} COMMAND bash ${TESTS_DIR}/features/oracle/hf_models.sh ${model})
    set_tests_properties(${name} PROPERTIES ENVIRONMENT DTYPE=${dtype} SKIP_RETURN_CODE 77
                         TIMEOUT 300 LABELS oracle)
  endforeach()
endforeach()

# models/mixtral.shard against MixtralForCausalLM (the same script): HF
# draws the weights and save_pretrained writes them (a sharded set, one
# tensor per expert), --init-from stacks them; the loss with HF's
# load-balancing loss (router_aux_loss_coef), 5 steps, fp32 within 1e-5;
# and one step at capacity 0.5 drops, layer by layer, the slots HF's
# router choices give past that capacity.
# oracle.hf_mixtral_f64: both sides in double, within 1e-10 (HF's casts
# to float32 kept in double: hf_models.py).
foreach(dtype f32 f64)
  if(dtype STREQUAL f32)
    set(name oracle.hf_mixtral)
  else()
    set(name oracle.hf_mixtral_f64)
  endif()
  add_test(NAME ${name} COMMAND bash ${TESTS_DIR}/features/oracle/hf_models.sh mixtral)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT DTYPE=${dtype} SKIP_RETURN_CODE 77
                       TIMEOUT 300 LABELS oracle)
endforeach()

# The CUDA target: models/neox.shard's partial rotary is refused at compile
# time, at the rope's line, before anything is written; the same model
# with the rotary written as slices (whole-head rope, slice, unequal
# concat, the exact GELU) builds with nvcc warning-free (long: about 15 s
# of nvcc).
add_test(NAME oracle.neox_cuda_refuses
         COMMAND sh -c "out=$(\"$0\" compile \"$1\" --target cuda -D vocab=97 -D seq=16 -D hidden=64 -D heads=4 -D layers=2 -o \"$2\" 2>&1) && exit 1; echo \"$out\" | grep 'neox.shard:[0-9]*:[0-9]*: error: cuda target: rope: over 4 of each head.s 16 dims (partial rotary) is not supported' && test ! -e \"$2/rank0.cu\""
                 ${SHARDC} ${MODELS_DIR}/neox.shard ${CMAKE_CURRENT_BINARY_DIR}/neox_cuda_refuses)
set_tests_properties(oracle.neox_cuda_refuses PROPERTIES LABELS oracle)
# models/bert.shard on the CUDA target: the masked attention and the loss
# that ignores targets are refused at their lines, nothing written.
add_test(NAME oracle.bert_cuda_refuses
         COMMAND sh -c "out=$(\"$0\" compile \"$1\" --target cuda -D vocab=97 -D seq=16 -D hidden=64 -D heads=4 -D layers=2 -o \"$2\" 2>&1) && exit 1; echo \"$out\" | grep 'bert.shard:[0-9]*:[0-9]*: error: cuda target: attention: attention with a key-padding mask is not supported' && echo \"$out\" | grep 'bert.shard:[0-9]*:[0-9]*: error: cuda target: cross_entropy: cross_entropy with ignore=1 is not supported' && test ! -e \"$2/rank0.cu\""
                 ${SHARDC} ${MODELS_DIR}/bert.shard ${CMAKE_CURRENT_BINARY_DIR}/bert_cuda_refuses)
set_tests_properties(oracle.bert_cuda_refuses PROPERTIES LABELS oracle)
if(TARGET shard_rt_cuda)
  add_test(NAME oracle.neox_slices_cuda_build
           COMMAND bash ${TESTS_DIR}/codegen/cuda/run.sh
                   ${CMAKE_CURRENT_BINARY_DIR}/neox_slices_cuda ${TESTS_DIR}/features/oracle/neox_slices.shard
                   -D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2)
  set_tests_properties(oracle.neox_slices_cuda_build PROPERTIES LABELS "oracle;cuda" TIMEOUT 300)
endif()
