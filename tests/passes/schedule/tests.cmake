# Pipeline schedules: the tables, their verifier and `shardc schedule`.
# sched_test (sched_test.c) runs the property sweep and the table-level
# checks in C; the goldens hold what the command prints and draws for the
# worked example of docs/schedules.md (p=2, v=2, m=4) and its errors. Regenerate
# a golden with UPDATE=1 (see tests/expect.sh) and check the result by eye;
# an SVG golden is best looked at in a browser.
set(SCHED_DIR ${TESTS_DIR}/passes/schedule)
set(SCHED_WORK ${CMAKE_CURRENT_BINARY_DIR}/schedule)
add_executable(sched_test ${SCHED_DIR}/sched_test.c)
target_include_directories(sched_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(sched_test PRIVATE shard_passes shard_ir m)

foreach(mode props example custom scale groups zb)
  add_test(NAME schedule/${mode} COMMAND sched_test ${mode})
endforeach()
# The rejection names the stages and the actions; its text is the golden.
# broken's tables break the posting order, which the verifier reports
# without simulating; unbatched's is in order and hangs, so it holds the
# golden of the deadlock report.
foreach(mode broken unbatched file)
  add_test(NAME schedule/${mode}
           COMMAND ${EXPECT} ${SCHED_DIR}/${mode}.expected 0 -- $<TARGET_FILE:sched_test> ${mode})
endforeach()

# The command on the worked example: summary, JSON, SVG and Chrome trace.
set(SCHED_EXAMPLE gpt2.shard --pp 2 --vpp 2 --global-batch 4)
function(sched_golden name status)
  add_test(NAME schedule/${name}
           COMMAND ${EXPECT} ${SCHED_DIR}/${name}.expected ${status} --cd ${MODELS_DIR}
                   -- ${SHARDC} schedule ${ARGN})
endfunction()
sched_golden(example_text 0 ${SCHED_EXAMPLE})
sched_golden(example_json 0 ${SCHED_EXAMPLE} --json)
sched_golden(gpipe_fb2_text 0 gpt2.shard --pp 4 --schedule gpipe --fb-ratio 2 --microbatch 2
             --dp 2 --global-batch 24)
# Pictures go to a file; draw.sh prints it for the comparison.
foreach(kind svg trace)
  add_test(NAME schedule/example_${kind}
           COMMAND ${EXPECT} ${SCHED_DIR}/example_${kind}.expected 0 --cd ${MODELS_DIR}
                   -- bash ${SCHED_DIR}/draw.sh ${kind} ${SCHED_WORK}_example.${kind}
                      ${SCHED_EXAMPLE})
endforeach()

# Configurations that cannot be scheduled, each an error that says why.
sched_golden(err_m_not_multiple 1 gpt2.shard --pp 4 --vpp 2 --global-batch 6)
sched_golden(err_v1_interleaved 1 gpt2.shard --pp 4 --schedule interleaved)
sched_golden(err_1f1b_chunks 1 gpt2.shard --pp 2 --vpp 2 --schedule 1f1b)
sched_golden(err_few_layers 1 gpt2.shard --pp 8 --vpp 2)
sched_golden(err_unknown 1 gpt2.shard --schedule zigzag)
sched_golden(err_batch 1 gpt2.shard --dp 4 --global-batch 10)

# The zero-bubble schedules: zb-h1's JSON (the unit-time bubble, its
# formula and the slots held until W) and zb-v's summary (its placement
# with GPT-2's tied embedding: pp/placement_p4v2_zbv).
sched_golden(zb_h1_json 0 gpt2.shard --pp 4 --global-batch 8 --schedule zb-h1 --json)
sched_golden(zb_v_text 0 gpt2.shard --pp 4 --vpp 2 --global-batch 8 --schedule zb-v)

# Interleaving for m not a multiple of p, in microbatch groups of N
# (Megatron-LM's microbatch_group_size_per_vp_stage), and a group that
# leaves a last group shorter than p.
sched_golden(vpp_group_text 0 gpt2.shard --pp 2 --vpp 2 --global-batch 3 --vpp-group 3)
sched_golden(err_vpp_group 1 gpt2.shard --pp 4 --vpp 2 --global-batch 7 --vpp-group 5)

# Schedules from files: 1F1B written as a file (the same tables as
# --schedule 1f1b, which sched_test file checks), a file with syntax
# errors (FILE:LINE:COL), one whose stages wait for each other, and both
# ways of naming a schedule at once.
set(SCHED_FILES ../tests/passes/schedule)
sched_golden(file_1f1b_text 0 gpt2.shard --schedule-file ${SCHED_FILES}/1f1b_p4_m8.sched)
sched_golden(err_file_syntax 1 gpt2.shard --schedule-file ${SCHED_FILES}/bad.sched)
sched_golden(err_file_deadlock 1 gpt2.shard --schedule-file ${SCHED_FILES}/deadlock.sched)
sched_golden(err_file_both 1 gpt2.shard --schedule 1f1b --schedule-file ${SCHED_FILES}/1f1b_p4_m8.sched)
