# Lexer tests. Golden: each NAME.shard here that lowers (token forms,
# CRLF line ends, no final newline, no `model` line) against NAME.ir, the
# IR that lowering alone gives. Robustness: adversarial inputs, most of
# them generated at test time by no_crash.sh into the build tree (deep
# nesting, 10 MB lines, NUL and high bytes), must be rejected with exit
# status 1 and an error, never a crash or a hang.
set(LEXER_DIR ${TESTS_DIR}/frontend/lexer)
foreach(name tokens crlf no_model_line)
  add_test(NAME lexer.${name}
           COMMAND ${EXPECT} ${LEXER_DIR}/${name}.ir 0 --cd ${LEXER_DIR} --
                   ${SHARDC} compile ${name}.shard --passes= --emit-ir)
endforeach()

set(LEXER_WORK ${CMAKE_CURRENT_BINARY_DIR}/lexer_inputs)
foreach(case deep_parens deep_lists deep_negation deep_calls deep_repeats block_chain
             long_name long_sum long_list long_comment many_bad_bytes nul_bytes all_bytes)
  add_test(NAME lexer.no_crash.${case}
           COMMAND bash ${LEXER_DIR}/no_crash.sh ${LEXER_WORK} ${case})
  set_tests_properties(lexer.no_crash.${case} PROPERTIES TIMEOUT 120)
endforeach()
add_test(NAME lexer.no_crash.huge_numbers
         COMMAND bash ${LEXER_DIR}/no_crash.sh ${LEXER_WORK} file
                 ${LEXER_DIR}/huge_numbers.shard)
add_test(NAME lexer.no_crash.truncated_model
         COMMAND sh -c "head -c 1500 '${MODELS_DIR}/gpt2.shard' >'${LEXER_WORK}/truncated.shard' && bash '${LEXER_DIR}/no_crash.sh' '${LEXER_WORK}' file '${LEXER_WORK}/truncated.shard'")
