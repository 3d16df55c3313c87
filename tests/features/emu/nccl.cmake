# The NCCL stand-in of the CPU emulator (include/nccl.h, nccl_mpi.c: NCCL
# over MPI point to point) and its tests, run on every machine with MPI.
# Included from tests/features/emu/tests.cmake. MPI is looked for where the MPI
# backend was built (runtime/), whose imported target is not seen here.
if(TARGET shard_comm_mpi)
  find_package(MPI COMPONENTS C REQUIRED)
  set(EMU_DIR ${CMAKE_CURRENT_LIST_DIR})
  add_library(shard_nccl_emu STATIC ${EMU_DIR}/nccl_mpi.c)
  target_include_directories(shard_nccl_emu PUBLIC ${EMU_DIR}/include)
  target_link_libraries(shard_nccl_emu PUBLIC MPI::MPI_C)

  # The direct test, and the same with the stand-in cutting every message
  # into pieces of 100 bytes, so that the splitting of messages longer than
  # an MPI count is exercised (on 3 ranks: odd sizes everywhere).
  add_executable(nccl_emu_test ${EMU_DIR}/nccl_test.c)
  target_link_libraries(nccl_emu_test PRIVATE shard_nccl_emu m)
  add_executable(nccl_emu_test_pieces ${EMU_DIR}/nccl_test.c ${EMU_DIR}/nccl_mpi.c)
  target_compile_definitions(nccl_emu_test_pieces PRIVATE NCCL_EMU_PIECE=100)
  target_include_directories(nccl_emu_test_pieces PRIVATE ${EMU_DIR}/include)
  target_link_libraries(nccl_emu_test_pieces PRIVATE MPI::MPI_C m)
  set(EMU_MPIRUN sh ${TESTS_DIR}/runtime/comm/mpirun.sh ${MPIEXEC_EXECUTABLE})
  add_test(NAME emu/nccl_np2 COMMAND ${EMU_MPIRUN} 2 $<TARGET_FILE:nccl_emu_test>)
  add_test(NAME emu/nccl_np4 COMMAND ${EMU_MPIRUN} 4 $<TARGET_FILE:nccl_emu_test>)
  add_test(NAME emu/nccl_pieces_np3 COMMAND ${EMU_MPIRUN} 3 $<TARGET_FILE:nccl_emu_test_pieces>)
  set(emu_nccl_tests emu/nccl_np2 emu/nccl_np4 emu/nccl_pieces_np3)
  set_tests_properties(${emu_nccl_tests} PROPERTIES LABELS emu TIMEOUT 60 RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE) # Open MPI's leaks at exit, as in tests/runtime/comm
    set_tests_properties(${emu_nccl_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()

# The NCCL backend of comm.h (runtime/comm_nccl.c) on the stand-in and the
# emulated CUDA runtime (tests/features/emu/tests.cmake): what the CUDA target's
# multi-rank programs link under the emulator.
if(TARGET shard_nccl_emu AND TARGET shard_kernels_cuda_emu)
  add_library(shard_comm_nccl_emu STATIC ${CMAKE_SOURCE_DIR}/runtime/comm/comm_nccl.c
                                         ${CMAKE_SOURCE_DIR}/runtime/comm/mpi_core.c)
  target_include_directories(shard_comm_nccl_emu PUBLIC ${SHARD_RT_INCLUDE_DIRS})
  target_link_libraries(shard_comm_nccl_emu PUBLIC shard_nccl_emu shard_kernels_cuda_emu
                                                   MPI::MPI_C shard_data)

  # tests/runtime/comm's checks with every buffer in device memory (comm_device_test.c),
  # and failures while the others wait in an NCCL all-reduce: a rank that
  # fails, one that exits without a word, one that stops answering (the
  # others' watchdog ends them after --timeout 2, naming the call).
  add_executable(comm_device_test ${EMU_DIR}/comm_device_test.c)
  target_link_libraries(comm_device_test PRIVATE shard_comm_nccl_emu m)
  set_target_properties(comm_device_test PROPERTIES LINKER_LANGUAGE CXX)
  set(EMU_FAIL bash ${TESTS_DIR}/runtime/comm/fail.sh ${TESTS_DIR}/runtime/comm/mpirun.sh ${MPIEXEC_EXECUTABLE})
  set(EMU_PROG $<TARGET_FILE:comm_device_test>)
  set(emu_comm_tests)
  foreach(np 2 4 8)
    add_test(NAME emu/comm_nccl_np${np} COMMAND ${EMU_MPIRUN} ${np} ${EMU_PROG} check)
    list(APPEND emu_comm_tests emu/comm_nccl_np${np})
  endforeach()
  add_test(NAME emu/comm_nccl_fail COMMAND ${EMU_FAIL} 4
           "shardc: error: rank 1: injected failure, on purpose" ${EMU_PROG} nccl_fail 1)
  add_test(NAME emu/comm_nccl_exit COMMAND ${EMU_FAIL} 4
           "Process name: \\[\\[[0-9]+,[0-9]+\\],2\\]" ${EMU_PROG} nccl_exit 2)
  add_test(NAME emu/comm_nccl_hang COMMAND ${EMU_FAIL} 4
           "rank [0-2] .*no progress for 2 s in starting, in ncclAllReduce on the tensor communicator"
           ${EMU_PROG} nccl_hang 3)
  add_test(NAME emu/comm_nccl_fail_world COMMAND ${EMU_FAIL} 4
           "shardc: error: rank 2: injected failure, on purpose" ${EMU_PROG} fail 2)
  # The compute stream reads an NCCL result only after waiting for it: a
  # blocking call or a wait orders it (the host does not wait), and a read
  # before the wait is refused as the race it is on a GPU.
  add_test(NAME emu/comm_nccl_order COMMAND ${EMU_FAIL} 2
           "cudaMemcpyAsync on the legacy stream uses 0x[0-9a-f]+, which ncclAllReduce on stream 0x[0-9a-f]+ writes, before the stream waited"
           ${EMU_PROG} nccl_order)
  list(APPEND emu_comm_tests emu/comm_nccl_fail emu/comm_nccl_exit emu/comm_nccl_hang
       emu/comm_nccl_fail_world emu/comm_nccl_order)
  set_tests_properties(${emu_comm_tests} PROPERTIES LABELS emu TIMEOUT 60 RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE)
    set_tests_properties(${emu_comm_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()

# The CUDA target's runtime on the emulator with the NCCL backend, as
# shard_rt_cuda_emu (tests.cmake) is with the CPU's: what the multi-rank
# CUDA programs link under the emulator (programs.cmake).
if(TARGET shard_comm_nccl_emu AND TARGET shard_rt_cuda_emu)
  add_library(shard_rt_cuda_nccl_emu STATIC ${EMU_RT_SOURCES}
                                            ${CMAKE_SOURCE_DIR}/runtime/device/device_cuda.c)
  target_include_directories(shard_rt_cuda_nccl_emu PUBLIC ${SHARD_RT_INCLUDE_DIRS})
  target_link_libraries(shard_rt_cuda_nccl_emu PUBLIC shard_data shard_kernels_cuda_emu
                                                      shard_comm_nccl_emu OpenMP::OpenMP_C
                                                      PkgConfig::CJSON m)
endif()
