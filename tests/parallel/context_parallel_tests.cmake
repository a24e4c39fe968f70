# Context parallel loss parity and its start-up errors (included by mpi_tests.cmake).
# Context parallel (parallel/context_parallel.h): the sequence split over cp with causal load
# balancing, ring attention by both rotate methods (allgather; alltoall = K/V passed around the
# ring, their gradients returned the same way), CP 2 and 4, CP x FSDP (dp_shard_cp sharding) and
# CP x TP, fused and separate, on mpi and on gloo. Vocabulary 258 for tp; Adam's eps 1e-6 as in
# the fused-kernel TP test (blockwise attention rounds differently from the fused kernel, and
# with eps 1e-8 Adam lifts that on near-zero gradients: CP 2 gave 8.7e-6 of the 1e-5 in norm,
# 3.9e-7 with eps 1e-6, losses 2.4e-8 either way).
set(_cp2 --parallelism.context_parallel_degree=2)
set(_cp4 --parallelism.context_parallel_degree=4)
set(_ring --parallelism.context_parallel_rotate_method=alltoall)
set(_gather --parallelism.context_parallel_rotate_method=allgather)
foreach(backend mpi gloo)
  add_test(NAME parallel_loss_parity_context_parallel_${backend}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} --
                   +--model.vocab_size=258,--optimizer.eps=1e-6,--comm.backend=${backend}
                   cp2_alltoall:2:${_cp2},${_ring}
                   cp2_allgather_separate:2:${_cp2},${_gather},--comm.collective_mode=separate
                   cp4_alltoall_separate:4:${_cp4},${_ring},--comm.collective_mode=separate
                   cp4_allgather:4:${_cp4},${_gather}
                   cp2_fsdp2_alltoall:4:${_cp2},${_ring},--parallelism.data_parallel_shard_degree=2
                   cp2_tp2_alltoall:4:${_cp2},${_ring},--parallelism.tensor_parallel_degree=2,--parallelism.data_parallel_shard_degree=1
                   cp2_tp2_allgather_separate:4:${_cp2},${_gather},--parallelism.tensor_parallel_degree=2,--parallelism.data_parallel_shard_degree=1,--comm.collective_mode=separate
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_loss_parity_context_parallel_${backend} PROPERTIES TIMEOUT 900 PROCESSORS 4)
endforeach()
# CP x PP: the pipeline's activations hold seq_len / cp tokens (single process at the
# pipeline's micro-batch of 1, as the pipeline tests).
add_test(NAME parallel_loss_parity_context_parallel_pipeline
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--optimizer.eps=1e-6 ^--training.local_batch_size=1
                 pp2_cp2_alltoall:4:--parallelism.pipeline_parallel_degree=2,${_cp2},${_ring},--parallelism.data_parallel_shard_degree=1,--training.local_batch_size=4
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_context_parallel_pipeline PROPERTIES TIMEOUT 900 PROCESSORS 4)
# Bad context-parallel input ends every rank with a message naming the keys:
# context_parallel_failure(<name> <regex> <titan-train options...>), 2 ranks, the debug model.
function(context_parallel_failure name regex)
  add_test(NAME parallel_context_parallel_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30 "${regex}"
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2 $<TARGET_FILE:titan-train>
                   --config ${CMAKE_SOURCE_DIR}/configs/debug_model.toml --training.steps 1
                   --parallelism.context_parallel_degree 2 ${ARGN}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_context_parallel_${name} PROPERTIES TIMEOUT 60 PROCESSORS 2)
endfunction()
context_parallel_failure(bad_seq_len
  "training.seq_len \\(34\\) must be divisible by 2 x parallelism.context_parallel_degree" --training.seq_len 34)
context_parallel_failure(bad_rotate_method
  "parallelism.context_parallel_rotate_method: expected \"allgather\" or \"alltoall\", got \"ring\""
  --parallelism.context_parallel_rotate_method ring)
