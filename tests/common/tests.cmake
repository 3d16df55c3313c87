# The f64 graph interpreter that gradcheck (tests/features/grad) and tpsim (tests/features/tp)
# share. Defined here because tests/CMakeLists.txt includes the areas in
# alphabetical order: common comes before both.
add_library(shard_test_interp STATIC ${CMAKE_CURRENT_LIST_DIR}/interp.c)
target_include_directories(shard_test_interp PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(shard_test_interp PUBLIC shard_ir shard_kernels_f64)
