// Where the gloo backend's ranks meet (gloo_backend.cpp): a file store in a folder (one
// host, or a file system all hosts share) or a TCP store that rank 0 serves (libtorch's
// c10d::TCPStore behind gloo's Store interface), for hosts that share no folder.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>

#include "collectives/comm_options.h"
#include "collectives/launch_env.h"

namespace titan {

struct GlooRendezvousPlan {
  bool tcp = false;
  std::string dir;         // file store: its folder
  bool owns_dir = false;   // file store: made by this job under /tmp, removed by it
  std::string where;       // for messages: "file store in DIR" / "TCP store at HOST:PORT (...)"
};

// The choice, without touching disk or network:
// 1. comm.rendezvous_dir set: a file store there (kept; TITAN_MASTER_ADDR must not be set);
// 2. env names a master (TITAN_MASTER_ADDR, or Open MPI across nodes, launch_env.h): TCP;
// 3. a launcher job id: a file store in /tmp/titan-gloo-<job id>, owned by the job;
// else a config error.
GlooRendezvousPlan plan_gloo_rendezvous(const CommOptions& options, const LaunchEnv& env);

// Opens the planned store. TCP: rank 0 starts the server on env.master_port (after checking
// that env.master_host is one of this host's addresses, so that a wrong address fails at
// once instead of as a peer's timeout); every rank connects to master_host:master_port
// within options.init_timeout_seconds. Failures name host:port, the rank and the source.
// File store: creates the folder.
std::shared_ptr<gloo::rendezvous::Store> open_gloo_store(const GlooRendezvousPlan& plan,
                                                         const CommOptions& options,
                                                         const LaunchEnv& env);

}  // namespace titan
