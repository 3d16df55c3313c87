# The NCCL stand-in of the CPU emulator (include/nccl.h, nccl_mpi.c: NCCL
# over MPI point to point) and its tests, run on every machine with MPI.
# Included from tests/emu/tests.cmake. MPI is looked for where the MPI
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
  set(EMU_MPIRUN sh ${TESTS_DIR}/comm/mpirun.sh ${MPIEXEC_EXECUTABLE})
  add_test(NAME emu/nccl_np2 COMMAND ${EMU_MPIRUN} 2 $<TARGET_FILE:nccl_emu_test>)
  add_test(NAME emu/nccl_np4 COMMAND ${EMU_MPIRUN} 4 $<TARGET_FILE:nccl_emu_test>)
  add_test(NAME emu/nccl_pieces_np3 COMMAND ${EMU_MPIRUN} 3 $<TARGET_FILE:nccl_emu_test_pieces>)
  set(emu_nccl_tests emu/nccl_np2 emu/nccl_np4 emu/nccl_pieces_np3)
  set_tests_properties(${emu_nccl_tests} PROPERTIES LABELS emu TIMEOUT 60 RESOURCE_LOCK mpirun)
  if(SHARDC_SANITIZE) # Open MPI's leaks at exit, as in tests/comm
    set_tests_properties(${emu_nccl_tests} PROPERTIES ENVIRONMENT "LSAN_OPTIONS=detect_leaks=0")
  endif()
endif()
