# Parser golden tests: each NAME.shard is a small valid model and NAME.ir
# the IR that lowering alone gives (`--passes=`: an empty pipeline), which
# must also read back unchanged. Each model must also pass the default
# pipeline (fold, shape, verify).
# Regenerate one with
#   UPDATE=1 tests/expect.sh tests/frontend/parser/NAME.ir 0 --cd tests/frontend/parser -- shardc compile NAME.shard --passes= --emit-ir
# and check the result by eye.
file(GLOB PARSER_INPUTS CONFIGURE_DEPENDS ${TESTS_DIR}/frontend/parser/*.shard)
foreach(input ${PARSER_INPUTS})
  get_filename_component(name ${input} NAME_WE)
  add_test(NAME parser.${name}
           COMMAND ${EXPECT} ${TESTS_DIR}/frontend/parser/${name}.ir 0 --cd ${TESTS_DIR}/frontend/parser --
                   ${SHARDC} compile ${name}.shard --passes= --emit-ir)
  add_test(NAME parser.${name}.pipeline COMMAND ${SHARDC} compile ${input})
  # The lowered IR reads back through ir_parse and prints the same.
  add_test(NAME parser.${name}.roundtrip
           COMMAND ${EXPECT} ${TESTS_DIR}/frontend/parser/${name}.ir 0 --cd ${TESTS_DIR}/frontend/parser --
                   ${SHARDC} compile ${name}.ir --passes= --emit-ir)
endforeach()

# The models the project ships lower and pass the default pipeline.
file(GLOB MODEL_FILES CONFIGURE_DEPENDS ${MODELS_DIR}/*.shard)
foreach(model ${MODEL_FILES})
  get_filename_component(name ${model} NAME_WE)
  add_test(NAME parser.model.${name} COMMAND ${SHARDC} compile ${model})
endforeach()
