// World: the process-level entry to the collective layer. init_distributed(CommOptions)
// starts the chosen backend, knows this process's rank and the job size, and makes a
// Communicator for any subset of ranks. Used by the Trainer (trainer/step/trainer.cpp), the
// simulator and DeviceMesh.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/backend.h"
#include "collectives/comm_options.h"
#include "collectives/communicator.h"

namespace titan {

// Where rank and size come from:
// - mpi: MPI_Init_thread (MPI_THREAD_MULTIPLE). Under mpirun/srun the launcher's job;
//   a plain process without a launcher is a job of size 1.
// - gloo: the launcher's environment (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE,
//   SLURM_PROCID/NTASKS) or TITAN_RANK / TITAN_WORLD_SIZE; no variables: size 1. Ranks meet
//   through a file store in options.rendezvous_dir (default /tmp/titan-gloo-<job id>).
//   TITAN_GLOO_IFNAME (network interface) or TITAN_GLOO_HOST (address to bind) choose the
//   network; default 127.0.0.1, which only works on one host. TITAN_GLOO_DEVICE_NICE (0-19)
//   lowers gloo's device thread's priority, for more ranks than cores (gloo_backend.cpp).
class World {
 public:
  explicit World(const CommOptions& options);
  // Frees the world communicator and the backend (gloo: final barrier, removes its store).
  // MPI itself is finalized at process exit, so a later World can start again.
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return backend_->rank(); }
  int size() const { return backend_->size(); }
  const CommOptions& options() const { return options_; }
  const std::string& backend_name() const { return options_.backend; }

  // Every rank of the job, group name "world".
  const std::shared_ptr<Communicator>& comm() const { return world_; }
  // A group of the given global ranks (in group-rank order). Only the members call it, with
  // the same arguments, in the same order relative to their other new_group calls; it
  // waits for all members (up to init_timeout_seconds).
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks, const std::string& name);

 private:
  CommOptions options_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Communicator> world_;
};

// Validates the options and starts the backend.
std::shared_ptr<World> init_distributed(const CommOptions& options);

}  // namespace titan
