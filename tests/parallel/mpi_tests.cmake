# Multi-rank DeviceMesh tests (included by tests/CMakeLists.txt).
add_executable(parallel_multirank ${CMAKE_CURRENT_LIST_DIR}/device_mesh_multirank.cpp
               ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
titan_torch_target(parallel_multirank)
target_link_libraries(parallel_multirank PRIVATE titan_parallel GTest::gtest)
foreach(backend mpi gloo)
  titan_mpi_test(parallel_mesh_${backend}_np4 4 $<TARGET_FILE:parallel_multirank>
                 --backend=${backend})
endforeach()
