# The CPU emulator of the CUDA runtime (tests/emu): its parts keep their own files.
include(${CMAKE_CURRENT_LIST_DIR}/nccl.cmake)
