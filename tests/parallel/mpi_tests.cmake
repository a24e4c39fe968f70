# Multi-rank DeviceMesh tests (included by tests/CMakeLists.txt).
add_executable(parallel_multirank ${CMAKE_CURRENT_LIST_DIR}/device_mesh_multirank.cpp)
titan_torch_target(parallel_multirank)
target_link_libraries(parallel_multirank PRIVATE titan_parallel GTest::gtest)
foreach(backend mpi gloo)
  titan_mpi_test(parallel_mesh_${backend}_np4 4 $<TARGET_FILE:parallel_multirank>
                 --backend=${backend})
endforeach()

# Loss parity against a single process (tests/parallel/loss_parity.py): parity_runner trains
# one layout; the registrations are grouped by parallelism, one file each.
add_executable(parity_runner ${CMAKE_CURRENT_LIST_DIR}/parity_runner.cpp)
titan_torch_target(parity_runner)
target_link_libraries(parity_runner PRIVATE titan_trainer)
include(${CMAKE_CURRENT_LIST_DIR}/data_parallel_tests.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_tests.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/pipeline_tests.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/context_parallel_tests.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/expert_parallel_tests.cmake)
