# Activation recomputation (--recompute): the pass's rewrite on tiny models
# (golden IR: text in, text out), the activations kept per layer against
# the formulas (memory.sh), and training equal to the bit with and without
# it (equal.sh; the equivalence grid, tests/features/pp_run/grid.sh, has rows under
# tensor, pipeline and data parallelism). Regenerate the goldens with
#   UPDATE=1 ctest -R '^recompute/pass' && git diff tests/features/recompute
# and read every changed line before keeping it.
set(RC_DIR ${TESTS_DIR}/features/recompute)
set(RC_PASSES --passes=fold,shape,unroll,autodiff,recompute,verify --emit-ir)
# rc_pass_test(NAME STATUS ARGS...): `shardc compile ARGS...` in tests/features/recompute.
function(rc_pass_test name status)
  add_test(NAME recompute/${name}
           COMMAND ${EXPECT} ${RC_DIR}/${name}.expected ${status} --cd ${RC_DIR}
                   -- ${SHARDC} compile ${ARGN})
endfunction()
rc_pass_test(pass_selective 0 unfused.shard -D layers=1 ${RC_PASSES} --recompute selective)
rc_pass_test(pass_full 0 unfused.shard -D layers=1 ${RC_PASSES} --recompute full)
rc_pass_test(pass_full_groups 0 ../../../models/gpt2.shard -D vocab=64 -D seq=8 -D hidden=16
             -D heads=2 -D layers=3 ${RC_PASSES} --recompute full --recompute-layers 2)
rc_pass_test(err_no_backward 1 unfused.shard --passes=fold,shape,unroll,recompute --recompute full)
rc_pass_test(err_no_layers 1 ../../passes/autodiff_ops.ir --passes=fold,shape,autodiff,recompute
             --recompute selective)
rc_pass_test(err_groups_not_full 1 unfused.shard --recompute selective --recompute-layers 2)

add_test(NAME recompute/memory COMMAND bash ${RC_DIR}/memory.sh)
set_tests_properties(recompute/memory PROPERTIES TIMEOUT 300 LABELS recompute)
if(TARGET shard_comm_mpi)
  add_test(NAME recompute/equal
           COMMAND bash ${RC_DIR}/equal.sh $<TARGET_FILE:tptool>)
  set_tests_properties(recompute/equal PROPERTIES TIMEOUT 600 LABELS recompute RESOURCE_LOCK mpirun)
endif()
