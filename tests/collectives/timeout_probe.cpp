// A 2+-rank job in which rank 1 misbehaves, to check that the others end with a message
// instead of hanging. Usage: timeout_probe --backend=mpi|gloo --mode=skip|die
//   skip: rank 1 leaves without joining the all_reduce (and shuts down normally)
//   die:  rank 1 vanishes (_exit(0)) before the all_reduce
// Run by expect_failure.sh from mpi_tests.cmake; train_timeout_seconds is 3.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <torch/torch.h>

#include "collectives/world.h"

int main(int argc, char** argv) {
  titan::CommOptions o;
  std::string mode = "skip";
  for (int i = 1; i < argc; ++i) {
    if (!std::strncmp(argv[i], "--backend=", 10)) o.backend = argv[i] + 10;
    if (!std::strncmp(argv[i], "--mode=", 7)) mode = argv[i] + 7;
  }
  o.train_timeout_seconds = 3;
  o.init_timeout_seconds = 20;
  auto world = titan::init_distributed(o);
  auto t = torch::ones({1000});
  world->comm()->all_reduce(t)->wait();  // everyone is up
  if (world->rank() == 1) {
    if (mode == "die") _exit(0);
    std::printf("rank 1: leaving early\n");
    return 0;
  }
  world->comm()->all_reduce(t)->wait();
  std::printf("rank %d: all_reduce returned, which it must not\n", world->rank());
  return 0;
}
