# Memory plan and CPU code generation. cgtool (cgtool.c) runs the CPU
# pipeline, then either checks the plan by replaying liveness or writes the
# rank program; the tests print the numbers they check.
set(CG_TESTS_DIR ${TESTS_DIR}/codegen)
add_executable(cgtool ${CG_TESTS_DIR}/cgtool.c)
target_link_libraries(cgtool PRIVATE shard_codegen shard_frontend shard_passes shard_ir)
set(CGTOOL $<TARGET_FILE:cgtool>)
set(CG_FWD_PASSES --passes fold,shape,verify,memplan)
