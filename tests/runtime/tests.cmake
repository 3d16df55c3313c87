# Runtime tests, against a hand-written rank program (toy_model.c) so they
# do not depend on the compiler. Each test prints the numbers it checks.
set(RT_TESTS_DIR ${TESTS_DIR}/runtime)

foreach(flavour f32 f64)
  add_executable(rt_toy_${flavour} ${RT_TESTS_DIR}/toy_model.c)
  target_link_libraries(rt_toy_${flavour} PRIVATE shard_rt_${flavour})
  add_executable(rt_unit_${flavour} ${RT_TESTS_DIR}/unit.c)
  target_link_libraries(rt_unit_${flavour} PRIVATE shard_rt_${flavour})
endforeach()
add_executable(rt_testtool ${RT_TESTS_DIR}/testtool.c)
target_link_libraries(rt_testtool PRIVATE shard_data)

foreach(flavour f32 f64)
  add_test(NAME runtime/unit_${flavour} COMMAND rt_unit_${flavour})
endforeach()
foreach(script data_errors checkpoint resume flags train gradcheck)
  add_test(NAME runtime/${script}
           COMMAND bash ${RT_TESTS_DIR}/${script}.sh $<TARGET_FILE:rt_toy_f32>
                   $<TARGET_FILE:rt_toy_f64> $<TARGET_FILE:rt_testtool>)
endforeach()
# The runtime's rooms keep their one-way order (docs/runtime.md): no file
# includes, declares or calls what a file of a higher room defines, and no
# files call each other in a circle. Read from the sources and the built
# libraries, the CUDA runtime and the NCCL backend too where they are built.
set(rooms_libs $<TARGET_FILE:shard_rt_f32> $<TARGET_FILE:shard_data>
               $<TARGET_FILE:${SHARD_COMM_LIB}>)
foreach(lib shard_rt_cuda shard_comm_nccl)
  if(TARGET ${lib})
    list(APPEND rooms_libs $<TARGET_FILE:${lib}>)
  endif()
endforeach()
add_test(NAME runtime/rooms
         COMMAND python3 ${RT_TESTS_DIR}/rooms.py ${CMAKE_SOURCE_DIR}/runtime "${SHARD_RT_ROOMS}"
                 ${rooms_libs})
set_tests_properties(runtime/rooms PROPERTIES LABELS runtime)
