# Hugging Face checkpoints both ways (runtime/state/ckpt_names.c,
# driver/export.c): names, config.json, sharded sets, --init-map and the
# errors, without transformers (hf_names.sh); against transformers itself
# for GPT-2, LLaMA and GPT-NeoX (hf_transformers.sh, in the long checks; it
# skips, saying why, when transformers cannot be imported).
set(HF_TESTS_DIR ${CMAKE_CURRENT_LIST_DIR})
add_test(NAME hf/names COMMAND bash ${HF_TESTS_DIR}/hf_names.sh)
add_test(NAME hf/transformers
         COMMAND bash ${HF_TESTS_DIR}/hf_transformers.sh)
set_tests_properties(hf/transformers PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# BERT's export (two prefixes, `out` spelled `output`, the tied decoder)
# loaded by transformers' BertForMaskedLM, every tensor equal (long: it
# skips, saying why, without transformers).
add_test(NAME hf/export_bert COMMAND bash ${HF_TESTS_DIR}/export_bert.sh)
set_tests_properties(hf/export_bert PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# Mixtral's per-expert tensors both ways, its config.json and the errors
# of a checkpoint of another shape, one run under --tp 2 (default set,
# about 2 s of CPU).
add_test(NAME hf/mixtral COMMAND bash ${HF_TESTS_DIR}/hf_mixtral.sh)
set_tests_properties(hf/mixtral PROPERTIES TIMEOUT 120 RESOURCE_LOCK mpirun)
