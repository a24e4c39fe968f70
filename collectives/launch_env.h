// detect_launch_env(): this process's rank, the job size and a job id, read from the
// launcher's environment. Used by the gloo backend (MPI finds them itself).
#pragma once

#include <string>

namespace titan {

struct LaunchEnv {
  int rank = 0;
  int size = 1;
  std::string job_id;  // empty when no launcher set one
  std::string source;  // which variables were used, for error messages
};

// First match wins: TITAN_RANK/TITAN_WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE (mpirun),
// PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun); else 0 of 1.
// job_id: TITAN_RUN_ID, OMPI_MCA_ess_base_jobid, SLURM_JOB_ID.SLURM_STEP_ID.
// Throws a config error for malformed or inconsistent values.
LaunchEnv detect_launch_env();

}  // namespace titan
