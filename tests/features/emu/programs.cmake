# The CUDA target's generated programs on the emulator: program.mk holds
# the make variables that build a `shardc compile --target cuda` folder
# with the C++ compiler against the emulated runtime and kernels instead of
# nvcc and CUDA's libraries:
#
#   make -C DIR -f Makefile -f BUILD/emu/program.mk
#
# (the later makefile's assignments win). tests/features/gpu/run.sh's model checks
# use it under GPU_EMU=1, and the emu/model/* tests below run them so: the
# same checks a GPU run makes, against the same CPU-target references.
set(emu_sanitize "")
if(SHARDC_SANITIZE)
  set(emu_sanitize "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
endif()
list(JOIN CJSON_LDFLAGS " " emu_cjson_flags)
# With MPI the programs link the NCCL backend (runtime/comm_nccl.c) on the
# stand-in of tests/features/emu/nccl.cmake, as they link the real one on a GPU;
# without, the CPU's comm backend (one rank only).
if(TARGET shard_rt_cuda_nccl_emu)
  set(emu_rt_libs "$<TARGET_FILE:shard_rt_cuda_nccl_emu> $<TARGET_FILE:shard_comm_nccl_emu> $<TARGET_FILE:shard_nccl_emu>")
  set(emu_checks nccl-t2 nccl-p2 nccl-d2 nccl-p2-bf16 nccl-kill nccl-t2-mixtral nccl-t2-bf16-mixtral
                 nccl-d2-mixtral nccl-p2-mixtral nccl-d2ep2-mixtral nccl-d4ep2-mixtral
                 nccl-t2d2ep2-mixtral nccl-p2d2ep2-mixtral nccl-d2ep2-bf16-mixtral
                 nccl-d4ep2z-mixtral)
else()
  set(emu_rt_libs "$<TARGET_FILE:shard_rt_cuda_emu> $<TARGET_FILE:${SHARD_COMM_LIB}>")
  set(emu_checks)
endif()
string(APPEND emu_rt_libs " $<TARGET_FILE:shard_data> $<TARGET_FILE:shard_kernels_cuda_emu> $<TARGET_FILE:shard_cuda_emu>")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/emu/program.mk CONTENT
"# Written by CMake (tests/features/emu/programs.cmake): builds a --target cuda program
# folder for the CPU emulator. make -C DIR -f Makefile -f this-file
NVCC = sh ${EMU_DIR}/cxx.sh ${CMAKE_CXX_COMPILER}
NVCCFLAGS = -O1 -std=c++20 -DSHARD_CUDA_EMU -Wall -Wextra -Wno-missing-field-initializers -Wno-unknown-pragmas -ffp-contract=off ${emu_sanitize}
CPPFLAGS = -I${EMU_DIR}/include -I${CMAKE_SOURCE_DIR} -I${CMAKE_SOURCE_DIR}/kernels/cuda
RTLIBS = ${emu_rt_libs}
LDLIBS = ${OpenMP_C_FLAGS} ${emu_cjson_flags} ${SHARD_COMM_LINK} -lm -lpthread
")

# The model checks of tests/features/gpu/run.sh on the emulator. They compile with
# --target cuda, which needs a shardc configured with nvcc (it refuses the
# target otherwise); without nvcc they say so and skip. Under the
# sanitizers the emulated programs run several times slower, so there a
# few checks stand for the rest: what the sanitizers add is memory errors
# in the generated code, the kernels and the backends, which one fp32 and
# one bf16 model, a checkpoint round trip and a tensor-parallel run over
# the NCCL backend all reach. Open MPI leaks at exit under LeakSanitizer,
# as in tests/runtime/comm, so the checks that start ranks with mpirun leave leak
# detection off.
set(emu_model_checks fp32-gpt2 fp32-llama bf16-gpt2 bf16-llama vector epilogues graphs grads ckpt
                     recompute recompute-bf16 dropout accum
                     fp32-mixtral fp32-mixtral-cap bf16-mixtral fp32-deepseek_moe bf16-deepseek_moe
                     ${emu_checks})
if(SHARDC_SANITIZE)
  set(emu_model_checks fp32-gpt2 bf16-llama ckpt)
  if(emu_checks)
    list(APPEND emu_model_checks nccl-t2 nccl-kill)
  endif()
endif()
foreach(check ${emu_model_checks})
  add_test(NAME emu/model/${check}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/features/gpu/run.sh --model-check ${check} ${CMAKE_BINARY_DIR})
  set(emu_env "GPU_EMU=1;OMP_NUM_THREADS=1")
  if(SHARDC_SANITIZE AND check MATCHES "^(nccl-|graphs)")
    string(APPEND emu_env ";LSAN_OPTIONS=detect_leaks=0")
  endif()
  # One at a time: the checks share their program folders (BUILD/gpu-models).
  # Only those that start ranks under mpirun (the NCCL layouts, and graphs'
  # p=2 part) hold the lock mpirun too; the others run one process, each
  # program by itself, and need not wait in the chain of multi-rank tests.
  set(emu_locks gpu_models)
  if(check MATCHES "^(nccl-|graphs)")
    list(APPEND emu_locks mpirun)
  endif()
  set_tests_properties(emu/model/${check} PROPERTIES LABELS emu SKIP_RETURN_CODE 77 TIMEOUT 600
                       RESOURCE_LOCK "${emu_locks}" ENVIRONMENT "${emu_env}")
endforeach()

# The bf16 comm report against the runtime's byte counters (--comm-stats):
# gpt2 bf16 at t=2 (sequence parallel) and p=2, built for the emulator and
# run over MPI (tests/features/tp/comm_bf16.sh).
add_test(NAME emu/comm_bf16
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/features/tp/comm_bf16.sh runtime)
set_tests_properties(emu/comm_bf16 PROPERTIES LABELS emu SKIP_RETURN_CODE 77 TIMEOUT 300
                     RESOURCE_LOCK mpirun ENVIRONMENT "OMP_NUM_THREADS=1")
# Open MPI leaks at exit what no suppression can name (tests/runtime/comm).
if(SHARDC_SANITIZE)
  set_tests_properties(emu/comm_bf16 PROPERTIES
                       ENVIRONMENT "OMP_NUM_THREADS=1;LSAN_OPTIONS=detect_leaks=0")
endif()
