# Pipeline parallel loss parity and its start-up errors (included by mpi_tests.cmake).
# Pipeline parallel: every schedule on 2 stages (4 micro-batches per step, 2 accumulation
# steps), Interleaved1F1B with 2 stages per rank, a custom CSV schedule; mpi and gloo, fused
# and separate across the runs.
set(_pp2 --parallelism.pipeline_parallel_degree=2,--training.local_batch_size=4)
add_test(NAME parallel_loss_parity_pipeline_schedules
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ^--training.local_batch_size=1
                 pp2_gpipe_gloo_separate:2:${_pp2},--parallelism.pipeline_parallel_schedule=GPipe,--comm.backend=gloo,--comm.collective_mode=separate
                 pp2_1f1b:2:${_pp2},--parallelism.pipeline_parallel_schedule=1F1B
                 pp2_interleaved_v2_separate:2:${_pp2},--parallelism.pipeline_parallel_schedule=Interleaved1F1B,--comm.collective_mode=separate
                 pp2_interleaved_zero_bubble_gloo:2:${_pp2},--parallelism.pipeline_parallel_schedule=InterleavedZeroBubble,--comm.backend=gloo
                 pp2_zbv:2:${_pp2},--parallelism.pipeline_parallel_schedule=ZBVZeroBubble
                 pp2_1f1b_op_ac:2:${_pp2},--parallelism.pipeline_parallel_schedule=1F1B,--activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op
                 pp2_zbv_op_ac:2:${_pp2},--parallelism.pipeline_parallel_schedule=ZBVZeroBubble,--activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op
                 pp2_csv:2:${_pp2},--parallelism.pipeline_parallel_schedule_csv=${CMAKE_CURRENT_LIST_DIR}/pp2_custom.csv
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_pipeline_schedules PROPERTIES TIMEOUT 900 PROCESSORS 2)
# Pipeline composed with FSDP, DDP and TP (vocabulary padded to 258 for tp); 8 ranks oversubscribed.
# The single process runs micro-batches of 1 like the pipeline (loss_parity.py's ^), and Adam's
# eps is 1e-6 as in the fused-kernel TP test: tensor parallelism's partial sums round
# differently, and with eps 1e-8 Adam lifts that to 1e-5 in ten steps on near-zero gradients.
set(_pp2tp --parallelism.pipeline_parallel_degree=2,--parallelism.tensor_parallel_degree=2)
add_test(NAME parallel_loss_parity_pipeline_composed
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=258,--optimizer.eps=1e-6 ^--training.local_batch_size=1
                 pp2_fsdp2:4:--parallelism.pipeline_parallel_degree=2,--parallelism.data_parallel_shard_degree=2
                 pp2_ddp2_separate:4:--parallelism.pipeline_parallel_degree=2,--parallelism.data_parallel_replicate_degree=2,--parallelism.data_parallel_shard_degree=1,--comm.collective_mode=separate
                 pp2_tp2:4:${_pp2tp},--parallelism.data_parallel_shard_degree=1,--training.local_batch_size=4
                 pp2_fsdp2_tp2:8:${_pp2tp},--parallelism.data_parallel_shard_degree=2,--parallelism.pipeline_parallel_schedule=Interleaved1F1B
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_pipeline_composed PROPERTIES TIMEOUT 900 PROCESSORS 8)
# Tied embeddings under PP (Megatron's way, docs/pipeline.md): the last stage's copy of the
# embedding is the output projection and the two gradients are summed over the first and last
# pipeline ranks. 1F1B on mpi, GPipe on gloo (separate), ZBV (rank 0 runs both ends: no sum),
# Interleaved1F1B, InterleavedZeroBubble (split backward: the tied head's weight gradient comes
# with its input gradient), with FSDP 2 (the sum over the gradient shards), with TP 2
# (vocabulary-sharded copies) and FSDP 2 under ZBV (the head unit gathered around both stages).
set(_pp2t --parallelism.pipeline_parallel_degree=2)
add_test(NAME parallel_loss_parity_pipeline_tied
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.tie_embeddings=true,--model.vocab_size=258,--optimizer.eps=1e-6
                 ^--training.local_batch_size=1
                 pp2_tied_1f1b:2:${_pp2t},--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=1F1B
                 pp2_tied_gpipe_gloo_separate:2:${_pp2t},--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=GPipe,--comm.backend=gloo,--comm.collective_mode=separate
                 pp2_tied_zbv:2:${_pp2t},--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=ZBVZeroBubble
                 pp2_tied_interleaved_separate:2:${_pp2t},--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=Interleaved1F1B,--comm.collective_mode=separate
                 pp2_tied_izb_gloo:2:${_pp2t},--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=InterleavedZeroBubble,--comm.backend=gloo
                 pp2_tied_fsdp2:4:${_pp2t},--parallelism.data_parallel_shard_degree=2
                 pp2_tied_fsdp2_gloo_separate:4:${_pp2t},--parallelism.data_parallel_shard_degree=2,--comm.backend=gloo,--comm.collective_mode=separate
                 pp2_tied_tp2:4:${_pp2t},--parallelism.tensor_parallel_degree=2,--parallelism.data_parallel_shard_degree=1,--training.local_batch_size=4
                 pp2_tied_fsdp2_zbv:4:${_pp2t},--parallelism.data_parallel_shard_degree=2,--parallelism.pipeline_parallel_schedule=ZBVZeroBubble
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_pipeline_tied PROPERTIES TIMEOUT 900 PROCESSORS 4)
# Bad pipeline input ends every rank with a clear message, no hang:
# pipeline_failure(<name> <np> <regex> <titan-train options...>) on the debug model.
function(pipeline_failure name np regex)
  add_test(NAME parallel_pipeline_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30 "${regex}"
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np ${np} $<TARGET_FILE:titan-train>
                   --config ${CMAKE_SOURCE_DIR}/configs/debug_model.toml --training.steps 1
                   --parallelism.pipeline_parallel_degree ${np} ${ARGN}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_pipeline_${name} PROPERTIES TIMEOUT 60 PROCESSORS ${np})
endfunction()
pipeline_failure(too_few_microbatches 2 "needs a multiple of the 2 pipeline ranks as micro-batches, got 3"
                 --parallelism.pipeline_parallel_schedule Interleaved1F1B --training.local_batch_size 3)
pipeline_failure(csv_deadlock 2 "deadlocks when sends and receives block"
                 --parallelism.pipeline_parallel_schedule_csv ${CMAKE_CURRENT_LIST_DIR}/pp2_deadlock.csv
                 --training.local_batch_size 2)
pipeline_failure(layers_cannot_split 4 "pipeline: cannot split 2 layers"
                 --parallelism.pipeline_parallel_schedule Interleaved1F1B --model.n_layers 2)
pipeline_failure(unknown_schedule 2 "pipeline_parallel_schedule.*2F2B"
                 --parallelism.pipeline_parallel_schedule 2F2B)
