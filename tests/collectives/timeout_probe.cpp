// A 2+-rank job in which rank 1 misbehaves, to check that the others end with a message
// instead of hanging. Usage:
//   timeout_probe --backend=mpi|gloo --mode=skip|die|ok [--init-timeout=S]
//   skip: rank 1 leaves without joining the all_reduce (and shuts down normally)
//   die:  rank 1 vanishes (_exit(0)) before the all_reduce
//   ok:   nobody misbehaves (exit 0)
// gloo: every rank first prints "rank R: rendezvous <where>" (gloo_store.h's plan), so
// that a test can check which store was used and that a /tmp folder is gone afterwards.
// Run by expect_failure.sh and gloo_rendezvous.sh from mpi_tests.cmake;
// train_timeout_seconds is 3, init_timeout_seconds 20 unless given.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <torch/torch.h>

#include "collectives/gloo_store.h"
#include "collectives/launch_env.h"
#include "collectives/world.h"
#include "common/error.h"

namespace {

int run(const std::string& backend, const std::string& mode, double init_timeout) {
  titan::CommOptions o;
  o.backend = backend;
  o.train_timeout_seconds = 3;
  o.init_timeout_seconds = init_timeout;
  if (backend == "gloo") {
    const titan::LaunchEnv env = titan::detect_launch_env();
    std::printf("rank %d: rendezvous %s\n", env.rank,
                titan::plan_gloo_rendezvous(o, env).where.c_str());
    std::fflush(stdout);
  }
  auto world = titan::init_distributed(o);
  auto t = torch::ones({1000});
  world->comm()->all_reduce(t)->wait();  // everyone is up
  if (mode == "ok") return 0;
  if (world->rank() == 1) {
    if (mode == "die") _exit(0);
    std::printf("rank 1: leaving early\n");
    return 0;
  }
  world->comm()->all_reduce(t)->wait();
  std::printf("rank %d: all_reduce returned, which it must not\n", world->rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "mpi", mode = "skip";
  double init_timeout = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--backend=", 10)) backend = argv[i] + 10;
    if (!std::strncmp(argv[i], "--mode=", 7)) mode = argv[i] + 7;
    if (!std::strncmp(argv[i], "--init-timeout=", 15)) init_timeout = std::atof(argv[i] + 15);
  }
  try {
    return run(backend, mode, init_timeout);
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "titan: %s\n", e.what());
    return 1;
  }
}
