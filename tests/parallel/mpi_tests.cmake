# Multi-rank DeviceMesh tests (included by tests/CMakeLists.txt).
add_executable(parallel_multirank ${CMAKE_CURRENT_LIST_DIR}/device_mesh_multirank.cpp
               ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
titan_torch_target(parallel_multirank)
target_link_libraries(parallel_multirank PRIVATE titan_parallel GTest::gtest)
foreach(backend mpi gloo)
  titan_mpi_test(parallel_mesh_${backend}_np4 4 $<TARGET_FILE:parallel_multirank>
                 --backend=${backend})
endforeach()

# Loss parity of FSDP / DDP / HSDP against a single process (tests/parallel/loss_parity.py).
add_executable(parity_runner ${CMAKE_CURRENT_LIST_DIR}/parity_runner.cpp ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
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
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(parallel_loss_parity_reshard_and_ac PROPERTIES TIMEOUT 600 PROCESSORS 2)

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
