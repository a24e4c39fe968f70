// Backend: the process-wide side of a collective backend (MPI runtime, gloo device and
// store) and the registry that maps CommOptions::backend to one. Used by World; a new
// backend is a new file plus one line in register_builtin_backends().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/comm_options.h"
#include "collectives/communicator.h"

namespace titan {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;  // this process in the whole job
  virtual int size() const = 0;  // processes in the job
  // Called by every member of `ranks` (global ranks, in group order; this rank must be one
  // of them) with the same arguments; members call their new_group()s in the same order.
  // Non-members do not call it.
  virtual std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                                  const std::string& name) = 0;
  // Called by World before it drops the backend, with the world communicator, while every
  // rank still runs (gloo: final barrier, then rank 0 removes the rendezvous files).
  virtual void shutdown(Communicator& world) { (void)world; }
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const CommOptions&)>;

void register_backend(const std::string& name, BackendFactory factory);
std::vector<std::string> backend_names();
// Config error listing the known names when options.backend is unknown.
std::unique_ptr<Backend> make_backend(const CommOptions& options);

// Defined by each backend's file; listed in register_builtin_backends().
void register_mpi_backend();
void register_gloo_backend();
void register_sim_backend();  // collectives/sim_backend.cpp

}  // namespace titan
