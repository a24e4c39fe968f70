# Loss parity of FSDP / DDP / HSDP against a single process (tests/parallel/loss_parity.py),
# with reshard policies and activation checkpointing (included by mpi_tests.cmake).
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
