# Multi-rank DeviceMesh tests (included by tests/CMakeLists.txt).
add_executable(parallel_multirank ${CMAKE_CURRENT_LIST_DIR}/device_mesh_multirank.cpp)
titan_torch_target(parallel_multirank)
target_link_libraries(parallel_multirank PRIVATE titan_parallel GTest::gtest)
foreach(backend mpi gloo)
  titan_mpi_test(parallel_mesh_${backend}_np4 4 $<TARGET_FILE:parallel_multirank>
                 --backend=${backend})
endforeach()

# Loss parity of FSDP / DDP / HSDP against a single process (tests/parallel/loss_parity.py).
add_executable(parity_runner ${CMAKE_CURRENT_LIST_DIR}/parity_runner.cpp)
titan_torch_target(parity_runner)
target_link_libraries(parity_runner PRIVATE titan_trainer)
set(_fsdp4 --parallelism.data_parallel_shard_degree=4)
set(_ddp2 --parallelism.data_parallel_replicate_degree=2,--parallelism.data_parallel_shard_degree=1)
set(_hsdp --parallelism.data_parallel_replicate_degree=2,--parallelism.data_parallel_shard_degree=2)
foreach(backend mpi gloo)
  set(_layouts)
  foreach(mode fused separate)
    set(_c --comm.backend=${backend},--comm.collective_mode=${mode})
    list(APPEND _layouts fsdp4_${mode}:4:${_fsdp4},${_c} ddp2_${mode}:2:${_ddp2},${_c}
         hsdp2x2_${mode}:4:${_hsdp},${_c})
  endforeach()
  add_test(NAME parallel_loss_parity_${backend}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_layouts}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_loss_parity_${backend} PROPERTIES TIMEOUT 900 PROCESSORS 4)
endforeach()
# Reshard policies and activation checkpointing change memory, never the numbers.
add_test(NAME parallel_loss_parity_reshard_and_ac
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} --
                 fsdp2_reshard_always:2:--parallelism.fsdp_reshard_after_forward=always
                 fsdp2_reshard_never:2:--parallelism.fsdp_reshard_after_forward=never
                 fsdp2_ac_full:2:--activation_checkpoint.mode=full
                 single_ac_selective:1:--activation_checkpoint.mode=selective,--activation_checkpoint.selective_every=2
                 single_ac_op:1:--activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op
                 fsdp2_ac_op:2:--activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_reshard_and_ac PROPERTIES TIMEOUT 600 PROCESSORS 2)
# Op-level selective AC on the composite ATen path (its reused products and attention take
# their own autograd nodes, trainer/model/kept_ops.h) and under tensor parallel, where the
# sequence-parallel reduce-scatter's output is kept and the recompute issues none.
set(_op_ac --activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op)
add_test(NAME parallel_loss_parity_op_ac_composite
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=258,--training.fused_kernels=false
                 single_ac_op:1:${_op_ac}
                 fsdp2_ac_op:2:${_op_ac},--parallelism.data_parallel_shard_degree=2
                 tp2_sp_ac_op:2:${_op_ac},--parallelism.tensor_parallel_degree=2
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_op_ac_composite PROPERTIES TIMEOUT 600 PROCESSORS 2)

# FSDP units as TorchTitan wraps them (embedding, blocks, head), with tied weights (the
# embedding joins the head unit) and with gradient sync on every micro-batch instead of
# deferred to the last one (global batch 8 over 2 ranks of 2: two micro-batches).
add_test(NAME parallel_loss_parity_fsdp_units
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.tie_embeddings=true
                 fsdp2_tied:2:--parallelism.data_parallel_shard_degree=2
                 fsdp2_tied_reshard_always:2:--parallelism.fsdp_reshard_after_forward=always
                 fsdp2_tied_sync_every_microbatch:2:--parallelism.fsdp_defer_gradient_sync=false
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_fsdp_units PROPERTIES TIMEOUT 600 PROCESSORS 2)
add_test(NAME parallel_loss_parity_fsdp_sync_every_microbatch
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} --
                 fsdp2_sync_every_microbatch:2:--parallelism.fsdp_defer_gradient_sync=false
                 hsdp2x2_deferred:4:--parallelism.data_parallel_replicate_degree=2,--parallelism.data_parallel_shard_degree=2,--training.local_batch_size=1
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_fsdp_sync_every_microbatch PROPERTIES TIMEOUT 600 PROCESSORS 4)

# Tensor parallel (with and without sequence / loss parallel) and its 2D / 3D compositions.
# The vocabulary (257 byte-level ids) is padded to 258 in every run so that it divides over tp.
# Both kernel paths. The composite ATen ops run the config as it is. With the fused kernels
# (trainer/model/kernels) the heads each rank holds go through the same per-head arithmetic,
# but the reassociation that row-parallel sums bring lands on other roundoff, and Adam's
# first steps turn an ~eps (1e-8) gradient element's roundoff into up to lr: at this seed one
# element of one weight moves by 5e-5 (2.4e-5 of the tensor, composite 3.4e-6; seeds 1-4
# both below 1e-5). The fused run therefore takes eps 1e-6, which bounds that gain (both
# paths then agree to 5e-7), and also checks the fused single process against the composite
# one.
set(_tp2 --parallelism.tensor_parallel_degree=2)
set(_tp_layouts
    tp2:2:${_tp2},--parallelism.enable_sequence_parallel=false
    tp2_sp:2:${_tp2}
    tp2_sp_no_loss_parallel:2:${_tp2},--parallelism.disable_loss_parallel=true
    tp2_separate_gloo:2:${_tp2},--comm.collective_mode=separate,--comm.backend=gloo
    tp2_fsdp2:4:${_tp2},--parallelism.data_parallel_shard_degree=2
    tp2_hsdp_2x1x2:4:${_tp2},--parallelism.data_parallel_replicate_degree=2,--parallelism.data_parallel_shard_degree=1)
add_test(NAME parallel_loss_parity_tensor_parallel
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=258,--training.fused_kernels=false
                 ${_tp_layouts}
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_tensor_parallel PROPERTIES TIMEOUT 600 PROCESSORS 4)
add_test(NAME parallel_loss_parity_tensor_parallel_fused_kernels
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=258,--optimizer.eps=1e-6
                 ${_tp_layouts} single_composite_kernels:1:--training.fused_kernels=false
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_tensor_parallel_fused_kernels PROPERTIES TIMEOUT 600 PROCESSORS 4)
# Non-gated MLPs (model.mlp_activation: w1 column-wise, w2 row-wise, no w3): gelu under TP 2
# with sequence and loss parallel and under FSDP 2, relu under TP 2.
add_test(NAME parallel_loss_parity_non_gated_mlp
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=258,--training.fused_kernels=false
                 +--model.mlp_activation=gelu tp2_sp_gelu:2:${_tp2}
                 fsdp2_gelu:2:--parallelism.data_parallel_shard_degree=2
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_non_gated_mlp PROPERTIES TIMEOUT 600 PROCESSORS 2)
add_test(NAME parallel_loss_parity_relu_mlp
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} --
                 +--model.vocab_size=258,--training.fused_kernels=false,--model.mlp_activation=relu
                 tp2_sp_relu:2:${_tp2}
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_relu_mlp PROPERTIES TIMEOUT 600 PROCESSORS 2)
# gelu under op-level selective AC (one product fewer per block for its every-other-product
# policy) and a zero-bubble pipeline (deferred weight gradients for w1 and w2 only); the single
# process runs the pipeline's micro-batch of 1 (^, as the pipeline tests below).
add_test(NAME parallel_loss_parity_non_gated_mlp_ac_pp
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.mlp_activation=gelu ^--training.local_batch_size=1
                 single_ac_op_gelu:1:--activation_checkpoint.mode=selective,--activation_checkpoint.selective_ac_option=op
                 pp2_zbv_gelu:2:--parallelism.pipeline_parallel_degree=2,--training.local_batch_size=4,--parallelism.pipeline_parallel_schedule=ZBVZeroBubble
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_non_gated_mlp_ac_pp PROPERTIES TIMEOUT 600 PROCESSORS 2)
# A degree that does not divide the heads is a startup error, not a crash.
add_test(NAME parallel_tensor_parallel_bad_degree
         COMMAND ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30
                 "parallelism.tensor_parallel_degree \\(3\\) must divide model.n_heads \\(8\\)"
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 3 $<TARGET_FILE:titan-train>
                 --config ${CMAKE_SOURCE_DIR}/configs/debug_model.toml
                 --parallelism.tensor_parallel_degree 3 --parallelism.data_parallel_shard_degree 1
                 --training.steps 1
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_tensor_parallel_bad_degree PROPERTIES TIMEOUT 60 PROCESSORS 3)

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
# Tensor parallel beyond the KV heads: 2 KV heads on 4 tp ranks, each replicated twice.
set(_tp4 --parallelism.tensor_parallel_degree=4,--parallelism.data_parallel_shard_degree=1)
add_test(NAME parallel_loss_parity_tp_kv_replicated
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- +--model.vocab_size=260,--model.n_kv_heads=2
                 tp4_kv2:4:${_tp4}
                 tp4_kv2_no_sp_gloo_separate:4:${_tp4},--parallelism.enable_sequence_parallel=false,--comm.backend=gloo,--comm.collective_mode=separate
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_tp_kv_replicated PROPERTIES TIMEOUT 600 PROCESSORS 4)

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
# MoE under tensor parallel, alone and with EP (experts and router whole on every tp rank; under
# SP each tp rank routes its own sequence shard and their gradients are summed over tp).
# Under SP the load-balancing loss (on, coefficient 1e-3) needs the routing statistics of the
# whole sequence: they are summed over tp before the loss is formed (trainer/step/moe_tensor_plan.h;
# with each tp rank's own, losses differed from one process by 8.4e-4, parameters by 5.1e-2).
set(_moe_tp +--model.flavor=debugmodel_moe,--model.moe_bias_update_coeff=1e-3,--model.vocab_size=258,--training.fused_kernels=false)
add_test(NAME parallel_loss_parity_expert_tensor_parallel
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe_tp}
                 moe_tp2:2:--parallelism.tensor_parallel_degree=2,--parallelism.enable_sequence_parallel=false
                 ep2_tp2_gloo_separate:4:--parallelism.tensor_parallel_degree=2,--parallelism.expert_parallel_degree=2,--parallelism.enable_sequence_parallel=false,--comm.backend=gloo,--comm.collective_mode=separate
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_expert_tensor_parallel PROPERTIES TIMEOUT 900 PROCESSORS 4)
add_test(NAME parallel_loss_parity_expert_tensor_parallel_sp
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe_tp}
                 moe_tp2_sp:2:--parallelism.tensor_parallel_degree=2
                 ep2_tp2_sp:4:--parallelism.tensor_parallel_degree=2,--parallelism.expert_parallel_degree=2
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_expert_tensor_parallel_sp PROPERTIES TIMEOUT 900 PROCESSORS 4)
# Expert tensor parallel (parallelism.expert_tensor_parallel_degree = tp): experts and the shared
# expert split over their hidden dim on tp, alone and with EP 2 (4 ranks: tp 2 x dp_shard 2, ep
# borrowed from dp_shard), with and without SP, load-balancing loss at 1e-2 so its gradient
# counts; both collective modes on mpi and gloo.
set(_etp --parallelism.tensor_parallel_degree=2,--parallelism.expert_tensor_parallel_degree=2)
foreach(backend mpi gloo)
  set(_c --comm.backend=${backend})
  add_test(NAME parallel_loss_parity_expert_tensor_parallel_etp_${backend}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe_tp},--model.moe_shared_ffn_dim=64,--model.moe_aux_loss_coeff=1e-2
                   etp2_sp_fused:2:${_etp},${_c},--comm.collective_mode=fused
                   etp2_separate:2:${_etp},${_c},--comm.collective_mode=separate,--parallelism.enable_sequence_parallel=false
                   ep2_etp2_sp_separate:4:${_etp},${_c},--comm.collective_mode=separate,--parallelism.expert_parallel_degree=2
                   ep2_etp2_fused:4:${_etp},${_c},--comm.collective_mode=fused,--parallelism.expert_parallel_degree=2,--parallelism.enable_sequence_parallel=false
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_loss_parity_expert_tensor_parallel_etp_${backend} PROPERTIES TIMEOUT 900 PROCESSORS 4)
endforeach()
# Bad expert-TP input ends every rank with a message naming the key.
function(expert_tensor_parallel_failure name config regex)
  add_test(NAME parallel_expert_tensor_parallel_${name}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30 "${regex}"
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2 $<TARGET_FILE:titan-train>
                   --config ${CMAKE_SOURCE_DIR}/configs/${config}.toml --training.steps 1 ${ARGN}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_expert_tensor_parallel_${name} PROPERTIES TIMEOUT 60 PROCESSORS 2)
endfunction()
expert_tensor_parallel_failure(not_1_or_tp debug_moe
  "parallelism.expert_tensor_parallel_degree \\(4\\) must be 1 .* or parallelism.tensor_parallel_degree \\(2"
  --model.vocab_size 258 --parallelism.tensor_parallel_degree 2 --parallelism.expert_tensor_parallel_degree 4)
expert_tensor_parallel_failure(dense_model debug_model
  "parallelism.expert_tensor_parallel_degree \\(2\\) > 1 needs a mixture-of-experts model"
  --parallelism.tensor_parallel_degree 2 --parallelism.expert_tensor_parallel_degree 2)
expert_tensor_parallel_failure(hidden_not_divisible debug_moe
  "parallelism.expert_tensor_parallel_degree \\(2\\) must divide the experts' hidden size \\(model.moe_ffn_dim = 95\\)"
  --model.vocab_size 258 --model.moe_ffn_dim 95 --parallelism.tensor_parallel_degree 2 --parallelism.expert_tensor_parallel_degree 2)

# Expert parallelism (parallel/expert_parallel.h) on the debug MoE: experts split over ep ranks
# borrowed from dp_shard, tokens exchanged by all-to-all-v; with dp_shard 4 and ep 2 the experts
# are FSDP-sharded over the other 2 (efsdp). Every layout against one process, both modes.
# The aux-loss-free bias update is on, so the tokens-per-expert sum over data ranks is checked too.
# 20 steps: by step 15 of EP 4 some rank routes no token to its experts (a case that once hung).
set(_moe +--model.flavor=debugmodel_moe,--model.moe_bias_update_coeff=1e-3,--training.steps=20)
foreach(backend mpi gloo)
  set(_layouts)
  foreach(mode fused separate)
    set(_c --comm.backend=${backend},--comm.collective_mode=${mode})
    list(APPEND _layouts
         ep2_${mode}:2:--parallelism.expert_parallel_degree=2,${_c}
         ep4_${mode}:4:--parallelism.expert_parallel_degree=4,${_c}
         ep2_efsdp2_${mode}:4:--parallelism.expert_parallel_degree=2,${_c})
  endforeach()
  add_test(NAME parallel_loss_parity_expert_parallel_${backend}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe} ${_layouts}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_loss_parity_expert_parallel_${backend} PROPERTIES TIMEOUT 900 PROCESSORS 4)
endforeach()
# Expert parallelism inside pipeline stages: ep borrowed from each stage's dp_shard (PP 2 x EP 2
# on 4 ranks, PP 2 x EP 4 and PP 2 x EP 2 x efsdp 2 on 8), schedules 1F1B, ZBV and
# InterleavedZeroBubble, bias update and load-balancing loss on. The load-balancing loss is a
# statistic of each forward (docs/models.md), so the single process runs the pipeline's
# micro-batch of 1 (^): with local batch 2 it differs by 3e-3 in losses after 20 steps, with 1
# the MoE pipeline alone keeps bit-identical parameters. Parameters held to 2e-6 (measured
# 1.2e-6: the data ranks' gradient sums, as EP without PP).
set(_moe_pp2 --parallelism.pipeline_parallel_degree=2)
foreach(backend mpi gloo)
  set(_c --comm.backend=${backend})
  if(backend STREQUAL "mpi")
    set(_extra pp2_ep2_zbv:4:${_moe_pp2},--training.local_batch_size=4,--parallelism.expert_parallel_degree=2,--parallelism.pipeline_parallel_schedule=ZBVZeroBubble,${_c}
               pp2_ep4:8:${_moe_pp2},--training.local_batch_size=2,--parallelism.expert_parallel_degree=4,${_c})
  else()
    set(_extra pp2_ep2_izb:4:${_moe_pp2},--training.local_batch_size=4,--parallelism.expert_parallel_degree=2,--parallelism.pipeline_parallel_schedule=InterleavedZeroBubble,${_c}
               pp2_ep2_efsdp2:8:${_moe_pp2},--training.local_batch_size=2,--parallelism.expert_parallel_degree=2,--parallelism.data_parallel_shard_degree=4,${_c})
  endif()
  add_test(NAME parallel_loss_parity_expert_pipeline_${backend}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe} ^--training.local_batch_size=1 %2e-6
                   moe_pp2:2:${_moe_pp2},--training.local_batch_size=4,${_c}
                   pp2_ep2_fused:4:${_moe_pp2},--training.local_batch_size=4,--parallelism.expert_parallel_degree=2,${_c},--comm.collective_mode=fused
                   pp2_ep2_separate:4:${_moe_pp2},--training.local_batch_size=4,--parallelism.expert_parallel_degree=2,${_c},--comm.collective_mode=separate
                   ${_extra}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_loss_parity_expert_pipeline_${backend} PROPERTIES TIMEOUT 900 PROCESSORS 8)
endforeach()
# MoE tensor parallel inside pipeline stages (PP 2 x TP 2 on 4 ranks, 20 steps, load-balancing
# loss and bias update on): etp 2, and etp 1 under SP. One process at the pipeline's micro-batch
# of 1 (^, docs/models.md). Measured: parameters 1.6e-6 (etp 2) and 3.9e-6 (etp 1 with SP, whose
# tp-partial gradient sums alone give 9.5e-6 with the loss off), within the default 1e-5.
add_test(NAME parallel_loss_parity_expert_tensor_pipeline
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/loss_parity.py $<TARGET_FILE:parity_runner>
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -- ${_moe},--model.vocab_size=258 ^--training.local_batch_size=1
                 pp2_tp2_etp2:4:${_moe_pp2},${_etp},--training.local_batch_size=8
                 pp2_tp2_sp_etp1:4:${_moe_pp2},--parallelism.tensor_parallel_degree=2,--training.local_batch_size=8
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_expert_tensor_pipeline PROPERTIES TIMEOUT 900 PROCESSORS 4)
# Bad expert-parallel input ends every rank with a message naming the key.
foreach(case "3;the experts per block \\(model.moe_experts = 8\\)" "4;data_parallel_shard_degree x context_parallel_degree \\(2 x 1")
  list(GET case 0 _ep)
  list(GET case 1 _msg)
  add_test(NAME parallel_expert_parallel_bad_degree_${_ep}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30
                   "parallelism.expert_parallel_degree \\(${_ep}\\) must divide ${_msg}"
                   ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 2 $<TARGET_FILE:titan-train>
                   --config ${CMAKE_SOURCE_DIR}/configs/debug_moe.toml
                   --parallelism.expert_parallel_degree ${_ep} --training.steps 1
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(parallel_expert_parallel_bad_degree_${_ep} PROPERTIES TIMEOUT 60 PROCESSORS 2)
endforeach()
