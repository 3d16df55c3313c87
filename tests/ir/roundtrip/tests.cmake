# IR text form: printing, parsing and printing again gives identical text,
# for every model (lowered by the frontend, and again after the default
# pipeline through the driver) and for the hand-written .ir files; malformed
# .ir files give the expected errors; the verifier rejects broken graphs;
# the map and use helpers passes build on work.
set(RT_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(roundtrip ${RT_DIR}/roundtrip.c)
target_link_libraries(roundtrip PRIVATE shard_frontend shard_ir)
add_executable(verify_test ${RT_DIR}/verify_test.c)
target_link_libraries(verify_test PRIVATE shard_ir)

add_test(NAME roundtrip.verify COMMAND verify_test)
add_executable(helpers_test ${RT_DIR}/helpers_test.c)
target_link_libraries(helpers_test PRIVATE shard_ir)
add_test(NAME roundtrip.helpers COMMAND helpers_test)

file(GLOB RT_MODELS ${MODELS_DIR}/*.shard)
foreach(model ${RT_MODELS})
  get_filename_component(name ${model} NAME_WE)
  add_test(NAME roundtrip.model.${name} COMMAND roundtrip ${model})
  # After fold and shape every dim is a literal and every result typed: the
  # driver's --emit-ir output must read back unchanged.
  set(folded ${CMAKE_CURRENT_BINARY_DIR}/roundtrip-${name}.ir)
  add_test(NAME roundtrip.folded.${name}
           COMMAND sh -c "\"$1\" compile \"$2\" --emit-ir > \"$3\" && \"$1\" compile \"$3\" --passes= --emit-ir | diff -u \"$3\" - && echo \"$2: folded IR round trip identical\""
                   sh ${SHARDC} ${model} ${folded})
endforeach()

file(GLOB RT_IR_FILES ${RT_DIR}/*.ir)
foreach(ir ${RT_IR_FILES})
  get_filename_component(name ${ir} NAME_WE)
  add_test(NAME roundtrip.ir.${name} COMMAND roundtrip ${ir})
  # The printed form itself is pinned too, so the format cannot drift while
  # still reading back.
  add_test(NAME roundtrip.print.${name}
           COMMAND ${EXPECT} ${RT_DIR}/${name}.out 0 --cd ${RT_DIR} --
                   ${SHARDC} compile ${name}.ir --passes= --emit-ir)
endforeach()

# Parse errors, read through the driver: expected output in errors/NAME.out.
file(GLOB RT_ERROR_FILES ${RT_DIR}/errors/*.ir)
foreach(ir ${RT_ERROR_FILES})
  get_filename_component(name ${ir} NAME_WE)
  add_test(NAME roundtrip.error.${name}
           COMMAND ${EXPECT} ${RT_DIR}/errors/${name}.out 1 --cd ${RT_DIR}/errors --
                   ${SHARDC} compile ${name}.ir --passes= --emit-ir)
endforeach()
