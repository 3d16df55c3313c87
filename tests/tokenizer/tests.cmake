# Byte-level BPE (tokenizer/, `shardc data --tokenizer/--bpe`, `shardc
# sample`): token-for-token equality with Hugging Face's tokenizers and with
# tiktoken over the corpus, data/tokenizer_adversarial.txt and a seeded
# random text, on vocabularies trained by both sides (hf_match.py; skipped,
# exit 77, without the Python packages, which scripts/install-deps.sh puts
# in build/pyenv), the errors of bad files and bad text (errors.sh), and a
# recorded checksum of the adversarial file's ids that needs no Python
# (golden.sh).
add_test(NAME tokenizer/hf_match
         COMMAND bash ${TESTS_DIR}/tokenizer/python.sh ${TESTS_DIR}/tokenizer/hf_match.py ${SHARDC}
                 ${CMAKE_SOURCE_DIR}/data/corpus.txt ${CMAKE_SOURCE_DIR}/data/tokenizer_adversarial.txt
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_hf_match)
set_tests_properties(tokenizer/hf_match PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS tokenizer)
add_test(NAME tokenizer/errors
         COMMAND bash ${TESTS_DIR}/tokenizer/errors.sh ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_errors)
set_tests_properties(tokenizer/errors PROPERTIES TIMEOUT 120 LABELS tokenizer)
# Training on BPE shards and `shardc sample` decoding through the tokenizer
# recorded beside them; the rank program's --sample-ids.
add_test(NAME tokenizer/sample
         COMMAND bash ${TESTS_DIR}/tokenizer/sample.sh ${CMAKE_SOURCE_DIR}/data/corpus.txt
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_sample)
set_tests_properties(tokenizer/sample PROPERTIES TIMEOUT 300 LABELS tokenizer)
# The adversarial file's ids against a recorded checksum, without Python.
add_test(NAME tokenizer/golden
         COMMAND bash ${TESTS_DIR}/tokenizer/golden.sh ${CMAKE_SOURCE_DIR}/data
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_golden)
set_tests_properties(tokenizer/golden PROPERTIES TIMEOUT 120 LABELS tokenizer)
# Many shards: `shardc data --shard-tokens`, --data DIR, and --resume at
# the same token of the same shard (or a warning that the data changed).
add_test(NAME tokenizer/shards COMMAND bash ${TESTS_DIR}/tokenizer/shards.sh)
set_tests_properties(tokenizer/shards PROPERTIES TIMEOUT 120 LABELS tokenizer)
