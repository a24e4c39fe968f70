# Mixture-of-experts parallelism: expert tensor parallel, expert parallel, both inside
# pipeline stages, and their start-up errors (included by mpi_tests.cmake).
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
