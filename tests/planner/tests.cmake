# The planner (planner/): hardware descriptions, the cost model and the
# simulator. planner_test (planner_test.c) checks the replayed bubble
# against the formulas, memory against REFERENCE.md's, the paper's rows
# within a band and the 1T simulation's time, the paper's section 5 figures
# and a later published result (figures); the goldens hold what
# `shardc hw` prints and its errors on bad description files.
set(PLANNER_DIR ${TESTS_DIR}/planner)
add_executable(planner_test ${PLANNER_DIR}/planner_test.c)
target_include_directories(planner_test PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(planner_test PRIVATE shard_planner shard_frontend shard_passes shard_ir m)

foreach(mode bubble memory paper scale units interleave search zb figures)
  add_test(NAME planner/${mode} COMMAND planner_test ${mode} ${MODELS_DIR})
endforeach()

function(planner_golden name status)
  add_test(NAME planner/${name}
           COMMAND ${EXPECT} ${PLANNER_DIR}/${name}.expected ${status} --cd ${PLANNER_DIR}
                   -- ${ARGN})
endfunction()
planner_golden(hw_list 0 ${SHARDC} hw)
planner_golden(hw_a100 0 ${SHARDC} hw a100)
planner_golden(hw_file 0 ${SHARDC} hw good.hw)
planner_golden(err_hw_file 1 ${SHARDC} hw bad.hw)
planner_golden(err_hw_missing 1 ${SHARDC} hw missing.hw)
planner_golden(err_simulate_hw 1 ${SHARDC} simulate ../../models/gpt2.shard --hw bad.hw)
# What simulate prints, text and JSON, with its numbers rounded (round.sh).
planner_golden(simulate_gpt2_json 0 bash round.sh ${SHARDC} simulate ../../models/gpt2.shard --tp 2
               --pp 2 --vpp 2 --microbatch 4 --global-batch 16 --hw a100 --json)
planner_golden(simulate_llama_text 0 bash round.sh ${SHARDC} simulate ../../models/llama.shard
               --tp 2 --sequence-parallel --pp 2 --dp 2 --zero 1 --global-batch 32 --hw h200)
planner_golden(plan_gpt2_text 0 bash round.sh ${SHARDC} plan ../../models/gpt2.shard --gpus 8
               --global-batch 64 --hw a100 --top 5)
planner_golden(plan_gpt2_json 0 bash round.sh ${SHARDC} plan ../../models/gpt2.shard --gpus 8
               --global-batch 64 --hw h200 --top 2 --json)
planner_golden(err_plan_nothing_fits 1 bash round.sh ${SHARDC} plan ../../models/gpt2.shard --gpus 8
               --global-batch 64 --hw a100 --memory-fraction 0.001)
planner_golden(err_plan_flags 1 ${SHARDC} plan ../../models/gpt2.shard --gpus 8 --hw a100)
# The simulated timeline of a small 1F1B step with data parallelism:
# compute, message waits, the reductions' stream and the optimizer.
planner_golden(simulate_trace 0 bash trace.sh ${CMAKE_CURRENT_BINARY_DIR}/planner_trace.json
               ../../models/gpt2.shard --pp 2 --dp 2 --global-batch 4 --hw a100)
# The search drawn: every replay's throughput against its memory, the
# chosen one ringed, the limit as a line (render it to look: rsvg-convert).
planner_golden(plan_svg 0 bash svg.sh plan ${CMAKE_CURRENT_BINARY_DIR}/planner_plan.svg
               ../../models/gpt2.shard --gpus 4 --global-batch 16 --hw a100)
# The simulated timeline drawn (timeline.c, shared with `shardc schedule
# --svg`): blocks as long as their predicted time, the message waits and
# the reductions in a lane under each stage, messages as arrows.
planner_golden(simulate_svg 0 bash svg.sh simulate
               ${CMAKE_CURRENT_BINARY_DIR}/planner_simulate.svg ../../models/gpt2.shard --pp 2
               --dp 2 --global-batch 4 --hw a100)
# Scatter/gather priced: a smaller message time with it than whole
# (--no-scatter-gather) when the stages sit on different nodes.
add_test(NAME planner/scatter_gather
         COMMAND bash ${PLANNER_DIR}/scatter_gather.sh ${MODELS_DIR}/gpt2.shard)
# Flag combinations the training program rejects or would ignore are
# refused by simulate, in the compiler's words where it rejects them.
add_test(NAME planner/flags
         COMMAND bash ${PLANNER_DIR}/flags.sh ${MODELS_DIR}/gpt2.shard)
# Routed layers (models/mixtral.shard, deepseek_moe.shard): the all-to-all
# bytes as rt_comm counts them, the experts divided by --ep, the load
# under --moe-imbalance and a capacity factor, --ep's refusals, and `plan`
# searching ep (moe.sh).
add_test(NAME planner/moe COMMAND bash ${PLANNER_DIR}/moe.sh ${MODELS_DIR})
# Megatron-Core's published Mixtral 8x7B throughput against ours, with the
# ratio held within 25% (moe_paper.sh cites the source).
add_test(NAME planner/moe_paper COMMAND bash ${PLANNER_DIR}/moe_paper.sh ${MODELS_DIR})
# simulate says when a configuration does not fit, and by how much.
add_test(NAME planner/fit
         COMMAND bash ${PLANNER_DIR}/fit.sh ${MODELS_DIR}/gpt3.shard)
# --precision bf16 (the CUDA target's): mixed precision's time without
# replicas, longer with them (fp32 weight-gradient reductions), fp32's
# longer still.
add_test(NAME planner/precision
         COMMAND bash ${PLANNER_DIR}/precision.sh ${MODELS_DIR}/gpt2.shard)
# `shardc hw --measure` at small sizes writes a description that `shardc
# hw FILE` reads back with plausible positive numbers.
add_test(NAME planner/hw_measure
         COMMAND bash ${PLANNER_DIR}/measure.sh ${CMAKE_CURRENT_BINARY_DIR}/planner_measured.hw)
# The planner's memory per rank at fp32 against the compiler's own memory
# plan for the same CPU programs: weights, gradients and optimizer state
# to the byte on every stage (activations printed, not compared).
set(PLANNER_SMALL -D layers=4 -D hidden=64 -D heads=4 -D seq=32 -D vocab=128)
set(PLANNER_MEM_WORK ${CMAKE_CURRENT_BINARY_DIR}/planner_memplan)
add_test(NAME planner/memory_plan_gpt2
         COMMAND bash ${PLANNER_DIR}/memory_plan.sh ${PLANNER_MEM_WORK}_1
                 ${MODELS_DIR}/gpt2.shard ${PLANNER_SMALL})
add_test(NAME planner/memory_plan_gpt2_3d
         COMMAND bash ${PLANNER_DIR}/memory_plan.sh ${PLANNER_MEM_WORK}_3d
                 ${MODELS_DIR}/gpt2.shard ${PLANNER_SMALL} --tp 2 --pp 2 --vpp 2 --global-batch 16)
add_test(NAME planner/memory_plan_gpt2_zero
         COMMAND bash ${PLANNER_DIR}/memory_plan.sh ${PLANNER_MEM_WORK}_zero
                 ${MODELS_DIR}/gpt2.shard ${PLANNER_SMALL} --dp 2 --zero 1 --global-batch 16)
add_test(NAME planner/memory_plan_llama_sp
         COMMAND bash ${PLANNER_DIR}/memory_plan.sh ${PLANNER_MEM_WORK}_llama
                 ${MODELS_DIR}/llama.shard -D layers=2 -D seq=256 -D hidden=256 -D heads=4
                 -D kv_heads=4 -D ffn=512 -D vocab=512 --tp 2 --sequence-parallel)
# `shardc run --trace` on the demo shape, on one rank and on two (t, p and
# d = 2 in turn): every rank's forward, backward and optimizer events in
# valid JSON; then each layout simulated with the description `shardc hw
# --measure --max-size 512` writes, and `shardc compare-trace` prints the
# measured and simulated step times and their ratio, held within 25%
# (trace_run.sh; in the sanitizer build printed only).
if(TARGET shard_comm_mpi)
  # Under the sanitizers the programs' timings say nothing of the model:
  # the comparison is printed, not held to the bound.
  if(SHARDC_SANITIZE)
    set(TRACE_BOUND 0)
  else()
    set(TRACE_BOUND 1)
  endif()
  add_test(NAME planner/trace_run
           COMMAND env COMPARE=1 BOUND=${TRACE_BOUND} bash ${PLANNER_DIR}/trace_run.sh ${SHARDC_DATA_DIR}/austen_train.bin
                   ${CMAKE_CURRENT_BINARY_DIR}/planner_trace_run)
  # Alone: another test on the same cores would slow the runs, not their prediction.
  set_tests_properties(planner/trace_run PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun RUN_SERIAL TRUE)
endif()
# The cost report of a compiled program (`shardc simulate --program DIR`,
# planner/program_cost.c, from the launch listing of codegen/listing.c):
# every call of the generated chunk functions listed, none unlisted, the
# bytes of an elementwise run as its kernel moves them, the report's sums,
# GPT-2 medium and a 1.3B shape in bf16 on the H200 preset, the usage
# errors (program_cost.sh; the CUDA half where shardc has the CUDA libraries).
add_test(NAME planner/program_cost
         COMMAND bash ${PLANNER_DIR}/program_cost.sh ${CMAKE_CURRENT_BINARY_DIR}/planner_program_cost)
# The same report of a CPU program against its measured run, per kernel
# class, within 25% for the demo shape and GPT-2 small, on the description
# `shardc hw --measure` writes (program_cost_trace.sh; minutes, alone on the
# machine). Label full, out of CI: the step agrees (118 ms measured, 118
# predicted at the demo shape) but the classes do not yet: the GEMM labels
# are priced 28% short, the elementwise and copy labels 45% long, attention
# 28% short (docs/targets.md, "The cost report of a program").
# Not in a sanitizer build: the instrumentation distorts both the
# description `hw --measure` takes and the run it is checked against (the
# classes 2 to 3 times off there), so the check would say nothing.
if(NOT SHARDC_SANITIZE)
  add_test(NAME planner/program_cost_trace
           COMMAND bash ${PLANNER_DIR}/program_cost_trace.sh ${SHARDC_DATA_DIR}/austen_train.bin
                   ${CMAKE_CURRENT_BINARY_DIR}/planner_program_cost_trace)
  set_tests_properties(planner/program_cost_trace PROPERTIES TIMEOUT 1200 RESOURCE_LOCK mpirun
                       RUN_SERIAL TRUE LABELS full)
endif()
