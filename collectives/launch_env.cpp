#include "collectives/launch_env.h"

#include <cstdlib>

#include "common/error.h"

namespace titan {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  TITAN_CONFIG_CHECK(end && *end == '\0' && v >= 0 && v < (1L << 30), "environment variable ",
                     name, "=\"", value, "\" is not a valid non-negative integer");
  return static_cast<int>(v);
}

}  // namespace

LaunchEnv detect_launch_env() {
  static const char* const kPairs[][2] = {{"TITAN_RANK", "TITAN_WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  LaunchEnv e;
  for (const auto& pair : kPairs) {
    const char* r = env(pair[0]);
    const char* s = env(pair[1]);
    if (!r && !s) continue;
    TITAN_CONFIG_CHECK(r && s, "environment: ", pair[0], " and ", pair[1],
                       " must be set together");
    e.rank = parse_int(pair[0], r);
    e.size = parse_int(pair[1], s);
    e.source = std::string(pair[0]) + "/" + pair[1];
    TITAN_CONFIG_CHECK(e.size >= 1 && e.rank < e.size, "environment: ", e.source, " give rank ",
                       e.rank, " of ", e.size);
    break;
  }
  if (const char* id = env("TITAN_RUN_ID")) {
    e.job_id = id;
  } else if (const char* id = env("OMPI_MCA_ess_base_jobid")) {
    e.job_id = std::string("ompi-") + id;
  } else if (const char* id = env("SLURM_JOB_ID")) {
    const char* step = env("SLURM_STEP_ID");
    e.job_id = std::string("slurm-") + id + "." + (step ? step : "0");
  }
  return e;
}

}  // namespace titan
