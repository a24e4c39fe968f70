#include "common/launcher_rank.h"

#include <cstdlib>

namespace titan {

LauncherVars launcher_vars() {
  static const char* const kPairs[][2] = {{"TITAN_RANK", "TITAN_WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v && *v) ? v : nullptr;
  };
  for (const auto& pair : kPairs) {
    LauncherVars v{pair[0], pair[1], env(pair[0]), env(pair[1])};
    if (v.rank || v.size) return v;
  }
  return {};
}

std::string launcher_rank_prefix() {
  const LauncherVars v = launcher_vars();
  return v.rank ? std::string("rank ") + v.rank + ": " : "";
}

bool launcher_first_rank() {
  const LauncherVars v = launcher_vars();
  return !v.rank || std::atoi(v.rank) == 0;
}

bool launched_with_peers() {
  const LauncherVars v = launcher_vars();
  return v.size && std::atoi(v.size) > 1;
}

}  // namespace titan
