#include "collectives/launch_env.h"

#include <cstdlib>

#include "common/error.h"
#include "common/launcher_rank.h"

namespace titan {

int parse_env_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  TITAN_CONFIG_CHECK(end && *end == '\0' && v >= 0 && v < (1L << 30), "environment variable ",
                     name, "=\"", value, "\" is not a valid non-negative integer");
  return static_cast<int>(v);
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_port(const char* name, const char* value) {
  const int port = parse_env_int(name, value);
  TITAN_CONFIG_CHECK(port >= 1 && port <= 65535, "environment variable ", name, "=\"", value,
                     "\" is not a TCP port (1-65535)");
  return port;
}

// The first IPv4 address of mpirun's own contact URI, "<jobid>.<vpid>;tcp://A[,B...]:port;...".
std::string ompi_launcher_host(const char* uri) {
  const std::string u = uri;
  const size_t at = u.find("tcp://");
  TITAN_CONFIG_CHECK(at != std::string::npos, "environment: OMPI_MCA_orte_hnp_uri=\"", u,
                     "\" names no tcp:// address; set TITAN_MASTER_ADDR to rank 0's host");
  const size_t begin = at + 6;
  const size_t end = u.find_first_of(",:;", begin);
  std::string host = u.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  TITAN_CONFIG_CHECK(!host.empty(), "environment: OMPI_MCA_orte_hnp_uri=\"", u,
                     "\" has an empty tcp:// address; set TITAN_MASTER_ADDR to rank 0's host");
  return host;
}

// TITAN_MASTER_ADDR/PORT first; then Open MPI's launcher host, needed when the ranks span
// nodes (a /tmp folder is per node) or asked for by TITAN_MASTER_PORT.
void detect_master(LaunchEnv& e) {
  const char* port = env("TITAN_MASTER_PORT");
  if (const char* addr = env("TITAN_MASTER_ADDR")) {
    e.master_host = addr;
    e.master_port = port ? parse_port("TITAN_MASTER_PORT", port) : kDefaultMasterPort;
    e.master_source = port ? "TITAN_MASTER_ADDR/TITAN_MASTER_PORT"
                           : "TITAN_MASTER_ADDR, default port " +
                                 std::to_string(kDefaultMasterPort);
    return;
  }
  const bool ompi = e.source.rfind("OMPI_", 0) == 0;
  bool multi_node = false;
  if (ompi) {
    if (const char* n = env("OMPI_MCA_orte_num_nodes"))
      multi_node = parse_env_int("OMPI_MCA_orte_num_nodes", n) > 1;
    if (const char* local = env("OMPI_COMM_WORLD_LOCAL_SIZE"))
      multi_node = multi_node || parse_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", local) < e.size;
  }
  if (!multi_node && !port) return;
  const char* uri = env("OMPI_MCA_orte_hnp_uri");
  TITAN_CONFIG_CHECK(ompi && uri, "environment: ",
                     port ? "TITAN_MASTER_PORT is set without TITAN_MASTER_ADDR"
                          : "the job spans several nodes",
                     " and no Open MPI launcher address (OMPI_MCA_orte_hnp_uri) is known: set "
                     "TITAN_MASTER_ADDR to the host of rank 0");
  e.master_host = ompi_launcher_host(uri);
  if (port) {
    e.master_port = parse_port("TITAN_MASTER_PORT", port);
    e.master_source = "Open MPI launcher host (OMPI_MCA_orte_hnp_uri), TITAN_MASTER_PORT";
  } else {
    const char* id = env("OMPI_MCA_ess_base_jobid");
    e.master_port = kOmpiPortBase + (id ? static_cast<int>(std::strtoul(id, nullptr, 10) %
                                                           kOmpiPortSpan)
                                        : 0);
    e.master_source = "Open MPI launcher host (OMPI_MCA_orte_hnp_uri), port from job id";
  }
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  if (const LauncherVars v = launcher_vars(); v.rank_name) {
    TITAN_CONFIG_CHECK(v.rank && v.size, "environment: ", v.rank_name, " and ", v.size_name,
                       " must be set together");
    e.rank = parse_env_int(v.rank_name, v.rank);
    e.size = parse_env_int(v.size_name, v.size);
    e.source = std::string(v.rank_name) + "/" + v.size_name;
    TITAN_CONFIG_CHECK(e.size >= 1 && e.rank < e.size, "environment: ", e.source, " give rank ",
                       e.rank, " of ", e.size);
  }
  if (const char* id = env("TITAN_RUN_ID")) {
    e.job_id = id;
  } else if (const char* id = env("OMPI_MCA_ess_base_jobid")) {
    e.job_id = std::string("ompi-") + id;
  } else if (const char* id = env("SLURM_JOB_ID")) {
    const char* step = env("SLURM_STEP_ID");
    e.job_id = std::string("slurm-") + id + "." + (step ? step : "0");
  }
  detect_master(e);
  return e;
}

}  // namespace titan
