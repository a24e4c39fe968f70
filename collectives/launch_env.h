// detect_launch_env(): this process's rank, the job size, a job id and, for a TCP-store
// rendezvous, where rank 0 serves the store, read from the launcher's environment. Used by
// the gloo backend (MPI finds them itself).
#pragma once

#include <string>

namespace titan {

struct LaunchEnv {
  int rank = 0;
  int size = 1;
  std::string job_id;  // empty when no launcher set one
  std::string source;  // which variables were used, for error messages

  // gloo's TCP store: rank 0 serves it on master_port, the others connect to
  // master_host:master_port. Empty host: no TCP store (the ranks meet through a folder).
  std::string master_host;
  int master_port = 0;
  std::string master_source;  // which variables gave host and port, for error messages
};

// Rank and size, first match wins: TITAN_RANK/TITAN_WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE
// (mpirun), PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun); else 0
// of 1. job_id: TITAN_RUN_ID, OMPI_MCA_ess_base_jobid, SLURM_JOB_ID.SLURM_STEP_ID.
// TCP store: TITAN_MASTER_ADDR (and TITAN_MASTER_PORT, default kDefaultMasterPort); else,
// under Open MPI 4 when the job spans several nodes or TITAN_MASTER_PORT is set, the host
// mpirun runs on (OMPI_MCA_orte_hnp_uri), where its default mapping puts rank 0, with
// TITAN_MASTER_PORT or a port derived from the job id (kOmpiPortBase + id % kOmpiPortSpan,
// below Linux's ephemeral range, so that two jobs from one launcher differ).
// Throws a config error for malformed or inconsistent values.
LaunchEnv detect_launch_env();

// The value of environment variable `name` as a non-negative integer; a config error naming
// the variable and its value otherwise.
int parse_env_int(const char* name, const char* value);

constexpr int kDefaultMasterPort = 29500;  // torchrun's (and TorchTitan's) MASTER_PORT default
constexpr int kOmpiPortBase = 20000;
constexpr int kOmpiPortSpan = 10000;

}  // namespace titan
