# Diagnostics: each NAME.shard is a malformed model and NAME.expected the
# exact output of `shardc compile NAME.shard` (every error with its line
# and caret), which must exit with status 1. Regenerate one with
#   UPDATE=1 tests/expect.sh tests/frontend/diag/NAME.expected 1 --cd tests/frontend/diag -- shardc compile NAME.shard
# and check the result by eye.
file(GLOB DIAG_INPUTS CONFIGURE_DEPENDS ${TESTS_DIR}/frontend/diag/*.shard)
foreach(input ${DIAG_INPUTS})
  get_filename_component(name ${input} NAME_WE)
  add_test(NAME diag.${name}
           COMMAND ${EXPECT} ${TESTS_DIR}/frontend/diag/${name}.expected 1 --cd ${TESTS_DIR}/frontend/diag --
                   ${SHARDC} compile ${name}.shard)
endforeach()

# A file that does not exist is an error naming it.
add_test(NAME diag.missing_file
         COMMAND ${EXPECT} ${TESTS_DIR}/frontend/diag/missing_file.expected 1 --cd ${TESTS_DIR}/frontend/diag --
                 ${SHARDC} compile no_such_model.shard)

# -D of a name the model does not define, or of a value that is no number.
add_test(NAME diag.define_unknown
         COMMAND ${EXPECT} ${TESTS_DIR}/frontend/diag/define_unknown.expected 1 --cd ${MODELS_DIR} --
                 ${SHARDC} compile gpt2.shard -D nothing=1 -D hidden=x)
