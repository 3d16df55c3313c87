# The CUDA target (codegen/cuda/) in CI, where there is nvcc but no GPU:
# the tiny GPT-2 and LLaMA (odd vocabulary and sequence, GQA) compile for
# --target cuda, build with nvcc warning-free, and their host code runs
# up to the point where it needs the device (run.sh). The GPU checks of
# the same programs against the CPU target are in tests/features/gpu/run.sh.
set(CT_DIR ${TESTS_DIR}/codegen/cuda)
set(CT_WORK ${CMAKE_CURRENT_BINARY_DIR}/cuda_target)
set(CT_GPT2 -D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D layers=2 -D batch=2)
set(CT_LLAMA -D vocab=257 -D seq=31 -D hidden=64 -D heads=4 -D kv_heads=2 -D layers=2
             -D batch=2 -D ffn=96)

# Without the NCCL backend (shard_comm_nccl), a mesh of more than one rank
# is refused before anything is written, with or without the CUDA
# libraries; with it, multi.sh builds a part of the equivalence grid's
# layouts in fp32 and bf16 and compares their tables with the CPU target's
# (about two minutes on two cores: one nvcc build per distinct program).
if(TARGET shard_comm_nccl)
  add_test(NAME cuda_target/multi_rank
           COMMAND bash ${CT_DIR}/multi.sh)
  set_tests_properties(cuda_target/multi_rank PROPERTIES LABELS cuda TIMEOUT 600)
else()
  add_test(NAME cuda_target/refuses_tp
           COMMAND sh -c "out=$(\"$0\" compile \"$1\" --tp 2 --target cuda -o \"$2\" 2>&1) && exit 1; echo \"$out\" | grep 'need the NCCL backend' && test ! -e \"$2/rank0.cu\""
                   ${SHARDC} ${MODELS_DIR}/gpt2.shard ${CT_WORK}/tp2)
endif()

if(TARGET shard_rt_cuda)
  add_test(NAME cuda_target/gpt2_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/gpt2 ${MODELS_DIR}/gpt2.shard ${CT_GPT2})
  add_test(NAME cuda_target/llama_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/llama ${MODELS_DIR}/llama.shard
                   ${CT_LLAMA})
  # A routed model (kernels/cuda/moe.cu's calls) builds warning-free too.
  add_test(NAME cuda_target/mixtral_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/mixtral ${MODELS_DIR}/mixtral.shard ${CT_LLAMA})
  set_tests_properties(cuda_target/mixtral_build PROPERTIES LABELS cuda)
  # --cuda-arch reaches the build file (nothing is built).
  add_test(NAME cuda_target/arch
           COMMAND sh -c "\"$0\" compile \"$1\" --target cuda --cuda-arch sm_80 -o \"$2\" >/dev/null && grep '^ARCH = sm_80$' \"$2/Makefile\""
                   ${SHARDC} ${MODELS_DIR}/gpt2.shard ${CT_WORK}/arch)
  # --precision bf16: the same two programs in bf16 (run.sh also checks the
  # plan's bf16 activations against the fp32 program's), and what bf16
  # refuses: the CPU target, and a mesh of more than one rank where the
  # runtime has no NCCL backend (with it, multi.sh builds every layout in
  # bf16).
  add_test(NAME cuda_target/gpt2_bf16_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/gpt2_bf16 ${MODELS_DIR}/gpt2.shard
                   ${CT_GPT2} --precision bf16)
  add_test(NAME cuda_target/llama_bf16_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/llama_bf16 ${MODELS_DIR}/llama.shard
                   ${CT_LLAMA} --precision bf16)
  if(TARGET shard_comm_nccl)
    set(CT_HAVE_NCCL 1)
  else()
    set(CT_HAVE_NCCL 0)
  endif()
  add_test(NAME cuda_target/bf16_refusals
           COMMAND sh -c "out=$(\"$0\" compile \"$1\" --precision bf16 -o \"$2/cpu\" 2>&1) && exit 1; echo \"$out\" | grep 'bf16 is for --target cuda' || exit 1; if [ \"$3\" = 1 ]; then \"$0\" compile \"$1\" --target cuda --precision bf16 --dp 2 -o \"$2/dp\" >/dev/null; else out=$(\"$0\" compile \"$1\" --target cuda --precision bf16 --dp 2 -o \"$2/dp\" 2>&1) && exit 1; echo \"$out\" | grep 'need the NCCL backend' && test ! -e \"$2/dp/rank0.cu\"; fi"
                   ${SHARDC} ${MODELS_DIR}/gpt2.shard ${CT_WORK}/bf16_refusals ${CT_HAVE_NCCL})
  # The GEMM epilogues: which nodes they absorb, and the program without
  # them (--no-gemm-epilogue), which must build as well.
  add_test(NAME cuda_target/gpt2_epilogues
           COMMAND bash ${CT_DIR}/epilogue.sh ${CT_WORK}/epilogues ${MODELS_DIR}/gpt2.shard 2
                   ${CT_GPT2})
  # The gemm-epilogue pass's printed choice, against its golden file, and
  # the same number of fused GEMMs in the program.
  add_test(NAME cuda_target/gpt2_epilogue_choice
           COMMAND sh ${EXPECT} ${CT_DIR}/gpt2_epilogue_choice.expected 0 --
                   bash ${CT_DIR}/epilogue_choice.sh ${CT_WORK}/epilogue_choice
                   ${MODELS_DIR}/gpt2.shard ${CT_GPT2})
  add_test(NAME cuda_target/gpt2_no_epilogue_build
           COMMAND bash ${CT_DIR}/run.sh ${CT_WORK}/gpt2_noepi ${MODELS_DIR}/gpt2.shard
                   ${CT_GPT2} --no-gemm-epilogue)
  # CUDA graphs: which chunk functions each layout's programs mark
  # capturable, and that a capturable function's dropout reads its seed
  # from device memory (graphs.sh; compiles only).
  add_test(NAME cuda_target/graphs
           COMMAND bash ${CT_DIR}/graphs.sh ${CT_WORK}/graphs ${CT_HAVE_NCCL})
  set_tests_properties(cuda_target/gpt2_build cuda_target/llama_build cuda_target/gpt2_bf16_build
                       cuda_target/llama_bf16_build cuda_target/gpt2_epilogues
                       cuda_target/gpt2_epilogue_choice
                       cuda_target/gpt2_no_epilogue_build cuda_target/graphs PROPERTIES LABELS cuda)
else()
  add_test(NAME cuda_target/no_libraries
           COMMAND sh -c "out=$(\"$0\" compile \"$1\" --target cuda -o \"$2\" 2>&1) && exit 1; echo \"$out\" | grep 'built without the CUDA libraries'"
                   ${SHARDC} ${MODELS_DIR}/gpt2.shard ${CT_WORK}/nolibs)
endif()

# The NCCL backend's own part of comm.h's contract, in CI: tests/runtime/comm's
# program linked against shard_comm_nccl instead of shard_comm_mpi. Its
# buffers are host memory, so it checks that the wrappers of comm_nccl.c
# keep the MPI backend's semantics (collectives, in-place forms, requests,
# counters, misuse and failures) wherever there is MPI; without a GPU the
# backend is MPI alone. The NCCL paths themselves need a GPU
# (tests/features/gpu/run.sh).
if(TARGET shard_comm_nccl)
  set(CT_COMM ${TESTS_DIR}/runtime/comm)
  add_executable(comm_test_nccl ${CT_COMM}/comm_test.c)
  target_link_libraries(comm_test_nccl PRIVATE shard_comm_nccl m)
  set(CT_MPIRUN sh ${CT_COMM}/mpirun.sh ${MPIEXEC_EXECUTABLE})
  set(CT_FAIL bash ${CT_COMM}/fail.sh ${CT_COMM}/mpirun.sh ${MPIEXEC_EXECUTABLE})
  set(CT_PROG $<TARGET_FILE:comm_test_nccl>)
  add_test(NAME cuda_target/comm_nccl_singleton COMMAND comm_test_nccl check)
  add_test(NAME cuda_target/comm_nccl_np2 COMMAND ${CT_MPIRUN} 2 ${CT_PROG} check)
  add_test(NAME cuda_target/comm_nccl_np4 COMMAND ${CT_MPIRUN} 4 ${CT_PROG} check)
  add_test(NAME cuda_target/comm_nccl_fail_fatal COMMAND ${CT_FAIL} 4
           "shardc: error: rank 1: injected failure, on purpose" ${CT_PROG} fail 1)
  add_test(NAME cuda_target/comm_nccl_fail_short COMMAND ${CT_FAIL} 2
           "shardc: error: rank 1: receive on the world communicator: rank 0 sent 5 elements, 10 were expected"
           ${CT_PROG} short)
  add_test(NAME cuda_target/comm_nccl_fail_misuse COMMAND ${CT_FAIL} 4
           "shardc: error: rank 3: rt_comm_send on the world communicator: peer 99 is out of range"
           ${CT_PROG} misuse 3)
  set_tests_properties(cuda_target/comm_nccl_singleton cuda_target/comm_nccl_np2
                       cuda_target/comm_nccl_np4 cuda_target/comm_nccl_fail_fatal
                       cuda_target/comm_nccl_fail_short cuda_target/comm_nccl_fail_misuse
                       PROPERTIES TIMEOUT 60 RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    set_tests_properties(cuda_target/comm_nccl_singleton cuda_target/comm_nccl_np2
                         cuda_target/comm_nccl_np4 cuda_target/comm_nccl_fail_fatal
                         cuda_target/comm_nccl_fail_short cuda_target/comm_nccl_fail_misuse
                         PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
