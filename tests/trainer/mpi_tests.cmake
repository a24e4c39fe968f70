# Multi-process checkpoint tests (included by tests/CMakeLists.txt). Each scenario launches
# several titan-train jobs (some under mpirun, one after another), so the driver runs mpirun
# itself instead of being wrapped by titan_mpi_test(); PROCESSORS keeps ctest -j honest. The
# drivers take MPIRUN_FLAGS (tests/CMakeLists.txt) from TITAN_TEST_MPIRUN_FLAGS (mpi_flags.py).
string(JOIN " " _mpirun_flags_env ${MPIRUN_FLAGS})
set(_mpirun_flags_env "TITAN_TEST_MPIRUN_FLAGS=${_mpirun_flags_env}")
set(_ckpt_driver ${CMAKE_CURRENT_LIST_DIR}/checkpoint_resume.py
    --titan-train $<TARGET_FILE:titan-train> --mpirun ${MPIEXEC_EXECUTABLE}
    --workdir ${CMAKE_BINARY_DIR}/checkpoint_tests)
foreach(scenario "exact;1" "exact;2" "exact;4" "reshard;4" "kill;2" "missing_shard;2" "pipeline;4"
                 "pipeline_tied;4" "expert;4" "expert_pipeline;4" "expert_tensor;4")
  list(GET scenario 0 name)
  list(GET scenario 1 np)
  add_test(NAME checkpoint_${name}_np${np}
           COMMAND /usr/bin/python3 ${_ckpt_driver} ${name} ${np}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(checkpoint_${name}_np${np} PROPERTIES TIMEOUT 300 PROCESSORS ${np}
                       ENVIRONMENT "${_mpirun_flags_env}")
endforeach()
# MoE expert biases (aux-loss-free balancing) survive a resume bit for bit: one process, FSDP 2, PP 2.
foreach(np 1 2)
  add_test(NAME checkpoint_moe_bias_np${np}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/moe_bias_resume.py ${np}
                   --titan-train $<TARGET_FILE:titan-train> --mpirun ${MPIEXEC_EXECUTABLE}
                   --workdir ${CMAKE_BINARY_DIR}/checkpoint_tests)
  set_tests_properties(checkpoint_moe_bias_np${np} PROPERTIES TIMEOUT 300 PROCESSORS ${np}
                       ENVIRONMENT "${_mpirun_flags_env}")
endforeach()

# Simulator: a simulated 4-chip step issues exactly the collectives (op, group, bytes, order
# per group) of a real 4-rank step; FSDP 4, HSDP 2x2 and FSDP 2 x TP 2, fused and separate.
add_executable(sim_collectives_multirank ${CMAKE_CURRENT_LIST_DIR}/sim_collectives_multirank.cpp)
titan_torch_target(sim_collectives_multirank)
target_link_libraries(sim_collectives_multirank PRIVATE titan_trainer)
target_compile_definitions(sim_collectives_multirank PRIVATE TITAN_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
foreach(mode fused separate)
  titan_mpi_test(trainer_sim_collectives_fsdp4_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode})
  titan_mpi_test(trainer_sim_collectives_hsdp2x2_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode}
                 --parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 2)
  titan_mpi_test(trainer_sim_collectives_fsdp2_tp2_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode}
                 --parallelism.tensor_parallel_degree 2 --model.vocab_size 258)
  # Pipeline: sends, receives and every other collective of each stage's rank.
  titan_mpi_test(trainer_sim_collectives_pp4_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode}
                 --parallelism.pipeline_parallel_degree 4)
  titan_mpi_test(trainer_sim_collectives_pp2_fsdp2_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode}
                 --parallelism.pipeline_parallel_degree 2 --parallelism.pipeline_parallel_schedule ZBVZeroBubble)
  # Tied embeddings: the first and last stages' gradient sum over "pp_ends", vocabulary-sharded.
  titan_mpi_test(trainer_sim_collectives_pp2_tp2_tied_${mode} 4 $<TARGET_FILE:sim_collectives_multirank> ${mode}
                 --parallelism.pipeline_parallel_degree 2 --parallelism.tensor_parallel_degree 2
                 --model.vocab_size 258 --model.tie_embeddings true)
endforeach()

# Hardening (issue 14): titan-train as a subprocess: stop signals, deterministic concurrent
# runs, launchers from another folder, extending a finished run, the MFU peak, one of 4 ranks
# SIGKILLed (mpi and gloo), a table of bad inputs (tests/trainer/hardening_inputs.py), and
# lone processes that need no Open MPI session directory.
foreach(scenario signal determinism launchers extend mfu rank_killed bad_inputs write_failure
                 lone_process)
  add_test(NAME trainer_hardening_${scenario}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/hardening_cli.py ${scenario}
                   --titan-train $<TARGET_FILE:titan-train> --workdir ${CMAKE_BINARY_DIR}/hardening_tests
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(trainer_hardening_${scenario} PROPERTIES TIMEOUT 300 PROCESSORS 2)
endforeach()
set_tests_properties(trainer_hardening_rank_killed PROPERTIES PROCESSORS 4)

# [profiling]: Chrome traces of real steps on 2 ranks (merged, aten ops and collectives per
# rank) and of a simulated step (tests/trainer/profiling_cli.py).
foreach(scenario real simulated)
  add_test(NAME trainer_profiling_${scenario}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/profiling_cli.py ${scenario}
                   --titan-train $<TARGET_FILE:titan-train> --mpirun ${MPIEXEC_EXECUTABLE}
                   --workdir ${CMAKE_BINARY_DIR}/profiling_tests
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(trainer_profiling_${scenario} PROPERTIES TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${_mpirun_flags_env}")
endforeach()

# One rank given other input than its peers (mpirun's ':' passes each side its own
# arguments): other model dims corrupted the heap (SIGABRT in malloc) before the start-up
# check of the ranks' configs; a dataset only rank 1 lacks left rank 0 in its next
# collective for the 100 s train timeout. Both now end within seconds naming key or rank.
set(_two_ranks ${CMAKE_SOURCE_DIR}/tests/collectives/expect_failure.sh 30)
set(_one_side $<TARGET_FILE:titan-train> --config ${CMAKE_SOURCE_DIR}/configs/debug_model.toml
    --job.dump_folder ${CMAKE_BINARY_DIR}/hardening_tests/ranks_differ --model.n_layers 1
    --training.seq_len 16 --training.local_batch_size 2 --training.threads 1 --training.steps 2
    --metrics.peak_flops 1e11)
add_test(NAME trainer_hardening_ranks_given_other_configs
         COMMAND ${_two_ranks} "rank 1 has model.n_layers = 2"
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 1 ${_one_side} : -np 1 ${_one_side} --model.n_layers 2
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
add_test(NAME trainer_hardening_one_rank_config_error
         COMMAND ${_two_ranks} "rank 1: config error: dataset file '/nonexistent/titan.txt' does not exist"
                 ${MPIEXEC_EXECUTABLE} ${MPIRUN_FLAGS} -np 1 ${_one_side} : -np 1 ${_one_side}
                 --training.dataset text --training.dataset_path /nonexistent/titan.txt
         WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(trainer_hardening_ranks_given_other_configs trainer_hardening_one_rank_config_error
                     PROPERTIES TIMEOUT 90 PROCESSORS 2)

# Start-up failures of a 2-rank job under a plain mpirun (tests/trainer/rank_failures.py): a
# gloo rank waiting in the rendezvous when its peer fails removes /tmp/titan-gloo-ompi-<id>;
# a config error every rank shares prints one line (rank 0, "all 2 ranks"); one only rank 1
# hits prints rank 1's line; a SIGTERM to a rank still in start-up ends the job. Each ends
# non-zero within seconds.
foreach(scenario gloo_folder shared_error one_rank_error startup_signal)
  add_test(NAME trainer_rank_failures_${scenario}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/rank_failures.py ${scenario}
                   --titan-train $<TARGET_FILE:titan-train> --mpirun ${MPIEXEC_EXECUTABLE}
                   --workdir ${CMAKE_BINARY_DIR}/hardening_tests/${scenario}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(trainer_rank_failures_${scenario} PROPERTIES TIMEOUT 180 PROCESSORS 2
                       ENVIRONMENT "${_mpirun_flags_env}")
endforeach()
