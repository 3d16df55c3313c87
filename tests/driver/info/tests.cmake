# `shardc info`: exact parameter counts, FLOPs against the paper's formula,
# the JSON fields, and the text form for GPT-2 small (golden).
add_test(NAME info.counts COMMAND bash ${TESTS_DIR}/driver/info/counts.sh ${MODELS_DIR})
add_test(NAME info.gpt2_text
         COMMAND ${EXPECT} ${TESTS_DIR}/driver/info/gpt2.expected 0 --cd ${MODELS_DIR} --
                 ${SHARDC} info gpt2.shard)
