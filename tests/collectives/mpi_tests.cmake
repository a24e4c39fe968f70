# Multi-rank tests of the collective layer (included by tests/CMakeLists.txt).
# Multi-rank binaries have their own main (multirank_main.h) so they are built here, not
# by the *_test.cpp glob.
set(_coll ${CMAKE_CURRENT_LIST_DIR})

# One binary: the op tests and main, all_to_all_single, fused mode's asynchrony.
add_executable(collectives_multirank ${_coll}/collectives_multirank.cpp
               ${_coll}/all_to_all_multirank.cpp ${_coll}/fused_async_multirank.cpp)
# File by file (three sources, each standing on its own includes).
set_target_properties(collectives_multirank PROPERTIES UNITY_BUILD OFF)
titan_torch_target(collectives_multirank)
target_link_libraries(collectives_multirank PRIVATE titan_collectives GTest::gtest)

add_executable(collectives_timeout_probe ${_coll}/timeout_probe.cpp)
titan_torch_target(collectives_timeout_probe)
target_link_libraries(collectives_timeout_probe PRIVATE titan_collectives)

foreach(backend mpi gloo)
  foreach(np 2 4)
    titan_mpi_test(collectives_${backend}_np${np} ${np}
                   $<TARGET_FILE:collectives_multirank> --backend=${backend})
  endforeach()
endforeach()

# A rank that leaves early or dies: the others must end non-zero, naming op, group and
# rank, well within timeout (3 s) + a few seconds.
set(_probe_msg "all_reduce \\([0-9]+ bytes\\) on group 'world' \\(rank 0 of 2, global rank 0\\)")
foreach(backend mpi gloo)
  add_test(NAME collectives_${backend}_rank_leaves_early
           COMMAND ${_coll}/expect_failure.sh 15 "${_probe_msg}"
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2
                   $<TARGET_FILE:collectives_timeout_probe> --backend=${backend} --mode=skip
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(collectives_${backend}_rank_leaves_early PROPERTIES TIMEOUT 60 PROCESSORS 2)
endforeach()
# gloo sees the closed connection and names the op; under mpi, mpirun itself takes the job
# down when a rank exits without MPI_Finalize (its message names the rank).
add_test(NAME collectives_gloo_rank_dies
         COMMAND ${_coll}/expect_failure.sh 15 "${_probe_msg}"
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2
                 $<TARGET_FILE:collectives_timeout_probe> --backend=gloo --mode=die
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
add_test(NAME collectives_mpi_rank_dies
         COMMAND ${_coll}/expect_failure.sh 15 "exited|terminated|aborted|killed"
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2
                 $<TARGET_FILE:collectives_timeout_probe> --backend=mpi --mode=die
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(collectives_gloo_rank_dies collectives_mpi_rank_dies
                     PROPERTIES TIMEOUT 60 PROCESSORS 2)

# launch/titan-launch drives a multi-rank binary end to end (gloo: it sets TITAN_RUN_ID).
add_test(NAME launch_titan_launch_gloo_np2
         COMMAND ${CMAKE_SOURCE_DIR}/launch/titan-launch -n 2 --backend gloo -- --backend=gloo
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(launch_titan_launch_gloo_np2 PROPERTIES TIMEOUT 120 PROCESSORS 2
                     ENVIRONMENT "TITAN_LAUNCH_BINARY=$<TARGET_FILE:collectives_multirank>")

# gloo rendezvous (tests/collectives/gloo_rendezvous.py): a TCP store, by hand-set ranks
# (no job id, so no file store is possible) and under mpirun from Open MPI's launcher host;
# an unreachable store fails fast, naming host:port and rank; after a plain mpirun failure
# the /tmp rendezvous folder is gone (removed by the collective layer, not a launcher).
set(_rdzv /usr/bin/python3 ${_coll}/gloo_rendezvous.py)
add_test(NAME collectives_gloo_tcp_store_np2
         COMMAND ${_rdzv} tcp-manual 2 $<TARGET_FILE:collectives_multirank> --backend=gloo)
add_test(NAME collectives_gloo_tcp_store_ompi_np4
         COMMAND ${_rdzv} tcp-ompi ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -x TITAN_MASTER_PORT
                 -np 4 $<TARGET_FILE:collectives_timeout_probe> --backend=gloo --mode=ok)
add_test(NAME collectives_gloo_tcp_store_unreachable
         COMMAND ${_rdzv} unreachable $<TARGET_FILE:collectives_timeout_probe>)
foreach(mode skip die)
  add_test(NAME collectives_gloo_rendezvous_removed_${mode}
           COMMAND ${_rdzv} cleanup ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2
                   $<TARGET_FILE:collectives_timeout_probe> --backend=gloo --mode=${mode})
endforeach()
set_tests_properties(collectives_gloo_tcp_store_np2 collectives_gloo_rendezvous_removed_skip
                     collectives_gloo_rendezvous_removed_die PROPERTIES TIMEOUT 120 PROCESSORS 2)
set_tests_properties(collectives_gloo_tcp_store_ompi_np4 PROPERTIES TIMEOUT 120 PROCESSORS 4)
set_tests_properties(collectives_gloo_tcp_store_unreachable PROPERTIES TIMEOUT 60)
