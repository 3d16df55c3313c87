# The CUDA target's sources on the CPU (tests/features/emu, docs/targets.md): the
# runtime API and cuBLASLt stand-ins (shard_cuda_emu), kernels/cuda/*.cu
# built as C++ against them (shard_kernels_cuda_emu), the CUDA runtime
# library on them (shard_rt_cuda_emu), and the GPU tests of tests/features/gpu run
# on those. No nvcc and no CUDA headers are needed, so this builds and runs
# everywhere; with nvcc, the real libraries and tests/features/gpu are untouched.
enable_language(CXX)
set(EMU_DIR ${CMAKE_CURRENT_LIST_DIR})

add_library(shard_cuda_emu STATIC ${EMU_DIR}/runtime.cc ${EMU_DIR}/launch.cc ${EMU_DIR}/cublaslt.cc)
# First on the include path: the stand-ins take the real headers' names.
target_include_directories(shard_cuda_emu BEFORE PUBLIC ${EMU_DIR}/include)
set_target_properties(shard_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
# No fused multiply-adds: the _rn intrinsics promise plain IEEE roundings.
target_compile_options(shard_cuda_emu PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)

# The .cu files as C++: one wrapper per file, so that the sources keep their
# .cu names (and nvcc's language) everywhere else.
file(GLOB EMU_CU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
set(EMU_WRAPPERS)
foreach(cu ${EMU_CU_SOURCES})
  get_filename_component(stem ${cu} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/emu/${stem}.cc)
  file(GENERATE OUTPUT ${wrapper} CONTENT "#include \"${cu}\"\n")
  list(APPEND EMU_WRAPPERS ${wrapper})
endforeach()
add_library(shard_kernels_cuda_emu STATIC ${EMU_WRAPPERS})
target_compile_definitions(shard_kernels_cuda_emu PUBLIC SHARD_CUDA_EMU)
target_include_directories(shard_kernels_cuda_emu PUBLIC ${CMAKE_SOURCE_DIR}/kernels/cuda)
set_target_properties(shard_kernels_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
# gcc does not know nvcc's #pragma unroll.
# Kernel bounds asserts (KC_ASSERT) stay on in every build type here: the
# emulator is where they can run in CI, and it is slow anyway.
target_compile_options(shard_kernels_cuda_emu PRIVATE -Wno-unknown-pragmas -UNDEBUG)
target_link_libraries(shard_kernels_cuda_emu PUBLIC shard_cuda_emu)

# The CUDA target's runtime on the emulator, as shard_rt_cuda is on CUDA
# (runtime/CMakeLists.txt), with the CPU's comm backend (one rank).
list(TRANSFORM SHARD_RT_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/runtime/ OUTPUT_VARIABLE EMU_RT_SOURCES)
add_library(shard_rt_cuda_emu STATIC ${EMU_RT_SOURCES} ${CMAKE_SOURCE_DIR}/runtime/device/device_cuda.c)
target_include_directories(shard_rt_cuda_emu PUBLIC ${SHARD_RT_INCLUDE_DIRS})
target_link_libraries(shard_rt_cuda_emu PUBLIC shard_data shard_kernels_cuda_emu ${SHARD_COMM_LIB}
                                               OpenMP::OpenMP_C PkgConfig::CJSON m)

add_executable(test_kernels_cuda_emu ${CMAKE_SOURCE_DIR}/tests/features/gpu/test_kernels_cuda.c)
target_link_libraries(test_kernels_cuda_emu PRIVATE shard_kernels_cuda_emu shard_kernels_f32)
set_target_properties(test_kernels_cuda_emu PROPERTIES LINKER_LANGUAGE CXX)
# The first three shapes of each list (odd ones and rows longer than a
# block among them: about 5 s of CPU in Release); the first two under the
# sanitizers, which are slower still.
set(emu_shapes --shapes 3)
if(SHARDC_SANITIZE)
  set(emu_shapes --small)
endif()
add_test(NAME emu/kernels COMMAND test_kernels_cuda_emu ${emu_shapes})
set_tests_properties(emu/kernels PROPERTIES LABELS emu
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
# The same with a block's threads, and a grid's blocks, in reverse order and
# in a seeded shuffled order (SHARD_EMU_ORDER, launch.cc): a kernel whose
# result depends on the order the hardware does not promise fails here.
foreach(order reverse shuffle:1 shuffle:20261201)
  string(REPLACE ":" "_" order_name ${order})
  add_test(NAME emu/kernels_${order_name} COMMAND test_kernels_cuda_emu ${emu_shapes})
  set_tests_properties(emu/kernels_${order_name} PROPERTIES LABELS emu
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive;SHARD_EMU_ORDER=${order}")
endforeach()

# Every shape of the flash attention list (test_flash_shapes): head sizes
# 16, 64 and 128, causal or not, kv groups of 1 to 3, and more key tiles
# than the backward's dq splits; each against the CPU twin, printing the
# largest error. In shuffled block and thread order, which the backward's
# fixed order of sums must not notice.
add_test(NAME emu/attention_flash COMMAND test_kernels_cuda_emu --attention)
set_tests_properties(emu/attention_flash PROPERTIES LABELS emu
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive;SHARD_EMU_ORDER=shuffle:7")

# The routed layer's kernels (kernels/cuda/moe.cu, test_moe_shapes): every
# shape against moe.c, the experts, positions, counts and dispatched rows
# exact; in shuffled block and thread order (about 2 s).
add_test(NAME emu/kernels_moe COMMAND test_kernels_cuda_emu --moe)
set_tests_properties(emu/kernels_moe PROPERTIES LABELS emu
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive;SHARD_EMU_ORDER=shuffle:5")

# The cost report's rows of a routed model's CUDA program (moe_cost.sh:
# every routed call listed, the grouped GEMMs' FLOPs; about 1 s).
add_test(NAME emu/moe_cost COMMAND bash ${EMU_DIR}/moe_cost.sh)
set_tests_properties(emu/moe_cost PROPERTIES LABELS emu SKIP_RETURN_CODE 77)

add_executable(test_device_cuda_emu ${CMAKE_SOURCE_DIR}/tests/features/gpu/test_device_cuda.c)
target_link_libraries(test_device_cuda_emu PRIVATE shard_rt_cuda_emu shard_kernels_f32)
set_target_properties(test_device_cuda_emu PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME emu/device COMMAND test_device_cuda_emu)
set_tests_properties(emu/device PROPERTIES LABELS emu)
# Without a device (SHARD_EMU_DEVICES=0) the first device call ends the
# program with "no CUDA device", as on a machine without a GPU.
add_test(NAME emu/no_device COMMAND test_device_cuda_emu --no-device)
set_tests_properties(emu/no_device PROPERTIES LABELS emu ENVIRONMENT SHARD_EMU_DEVICES=0
                     PASS_REGULAR_EXPRESSION "error: no CUDA device")

# The whole shape list of the kernel test (about 30 s in Release): make test-full.
if(SHARDC_TEST_FULL)
  add_test(NAME emu/kernels_full COMMAND test_kernels_cuda_emu)
  set_tests_properties(emu/kernels_full PROPERTIES LABELS "emu;full"
                       ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
endif()

# The emulator's own checks (tests/features/emu/test_emu.cc).
add_executable(test_emu ${EMU_DIR}/test_emu.cc)
target_compile_definitions(test_emu PRIVATE SHARD_CUDA_EMU)
set_target_properties(test_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
target_link_libraries(test_emu PRIVATE shard_cuda_emu)
add_test(NAME emu/self COMMAND test_emu)
set_tests_properties(emu/self PROPERTIES LABELS emu)

# The NCCL stand-in (nccl_mpi.c) and the NCCL backend of comm.h on the emulator.
include(${CMAKE_CURRENT_LIST_DIR}/nccl.cmake)

# The generated CUDA programs on the emulator (programs.cmake: the make
# variables that build them with the C++ compiler, and their model checks).
if(EXISTS ${EMU_DIR}/programs.cmake)
  include(${EMU_DIR}/programs.cmake)
endif()
