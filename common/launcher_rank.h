// Where the launcher put this process's rank and the job's size: the one reader of those
// environment variables, for the gloo backend's rendezvous (collectives/launch_env.h), the
// config loader's once-per-job messages and titan-train's failure path (trainer/main.cpp).
#pragma once

#include <string>

namespace titan {

// The first pair with either variable set (an empty value counts as unset), in this order:
// TITAN_RANK/TITAN_WORLD_SIZE (by hand or a script), OMPI_COMM_WORLD_RANK/SIZE (mpirun),
// PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun).
struct LauncherVars {
  const char* rank_name = nullptr;  // nullptr: no launcher variable is set
  const char* size_name = nullptr;
  const char* rank = nullptr;  // the values; nullptr where that variable is unset
  const char* size = nullptr;
};
LauncherVars launcher_vars();

// For messages only, never throwing: "rank 3: " under a launcher, else ""; whether this is
// the launcher's rank 0 (or a lone process); whether the launcher started other ranks.
std::string launcher_rank_prefix();
bool launcher_first_rank();
bool launched_with_peers();

}  // namespace titan
