# The CUDA target's generated programs on the emulator: program.mk holds
# the make variables that build a `shardc compile --target cuda` folder
# with the C++ compiler against the emulated runtime and kernels instead of
# nvcc and CUDA's libraries:
#
#   make -C DIR -f Makefile -f BUILD/emu/program.mk
#
# (the later makefile's assignments win). tests/gpu/run.sh's model checks
# use it under GPU_EMU=1, and the emu/model/* tests below run them so: the
# same checks a GPU run makes, against the same CPU-target references.
set(emu_sanitize "")
if(SHARDC_SANITIZE)
  set(emu_sanitize "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
endif()
list(JOIN CJSON_LDFLAGS " " emu_cjson_flags)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/emu/program.mk CONTENT
"# Written by CMake (tests/emu/programs.cmake): builds a --target cuda program
# folder for the CPU emulator. make -C DIR -f Makefile -f this-file
NVCC = sh ${EMU_DIR}/cxx.sh ${CMAKE_CXX_COMPILER}
NVCCFLAGS = -O1 -std=c++20 -DSHARD_CUDA_EMU -Wall -Wextra -Wno-missing-field-initializers -Wno-unknown-pragmas -ffp-contract=off ${emu_sanitize}
CPPFLAGS = -I${EMU_DIR}/include -I${CMAKE_SOURCE_DIR} -I${CMAKE_SOURCE_DIR}/kernels/cuda
RTLIBS = $<TARGET_FILE:shard_rt_cuda_emu> $<TARGET_FILE:${SHARD_COMM_LIB}> $<TARGET_FILE:shard_data> $<TARGET_FILE:shard_kernels_cuda_emu> $<TARGET_FILE:shard_cuda_emu>
LDLIBS = ${OpenMP_C_FLAGS} ${emu_cjson_flags} ${SHARD_COMM_LINK} -lm
")

# The model checks of tests/gpu/run.sh on the emulator. They compile with
# --target cuda, which needs a shardc configured with nvcc (it refuses the
# target otherwise); without nvcc they say so and skip.
foreach(check fp32-gpt2 fp32-llama bf16-gpt2 bf16-llama epilogues grads ckpt recompute
              recompute-bf16 dropout accum)
  add_test(NAME emu/model/${check}
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/run.sh --model-check ${check} ${CMAKE_BINARY_DIR})
  # One at a time: the checks share their program folders (BUILD/gpu-models).
  set_tests_properties(emu/model/${check} PROPERTIES LABELS emu SKIP_RETURN_CODE 77 TIMEOUT 600
                       RESOURCE_LOCK gpu_models
                       ENVIRONMENT "GPU_EMU=1;OMP_NUM_THREADS=1")
endforeach()
