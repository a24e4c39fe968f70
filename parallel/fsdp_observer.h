// What FSDP sizes by the shard degree, told to an observer: the simulator records a step once
// at one dp_shard degree and resizes the recording for the others
// (trainer/simulate/shard_resize.h). A shard holds ceil(N / W) elements of an N-element
// parameter and its padded full buffer W times that, so the recording needs to know which
// tensors are shard-sized and which parameters each collective carries; every other size in
// the step does not depend on W. Process-wide, set only while a simulated step is recorded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace titan {

struct FsdpObserver {
  virtual ~FsdpObserver() = default;
  // A plan was built over a shard group of `shard_degree` ranks for parameters of these
  // element counts (their full, unsharded numel, tensor-parallel local).
  virtual void plan(int64_t shard_degree, const std::vector<int64_t>& param_numels) = 0;
  // A tensor created during the step whose size follows the shard of an N-element parameter:
  // the shard itself (ceil(N / W) elements) or its padded full buffer (W times that).
  virtual void shard_sized(const torch::Tensor& t, int64_t param_numel) = 0;
  // A list collective FSDP issues: op ("all_gather", "reduce_scatter", "all_reduce") on
  // `group`, one tensor per parameter (its numel N and dtype); `padded`: the tensors the
  // communicator sizes the call by are the padded full buffers (all-gather outputs,
  // reduce-scatter inputs), else the shards (the replica all-reduce).
  virtual void collective(const std::string& op, const std::string& group, const std::vector<int64_t>& param_numels,
                          const std::vector<at::ScalarType>& dtypes, bool padded) = 0;
  // Something in the step sizes tensors by the shard in a way the observer cannot follow.
  virtual void unsupported(const std::string& why) = 0;
};

// The observer FSDP reports to (null: none, the default). Not thread safe: set it before a
// recording and clear it after.
void set_fsdp_observer(FsdpObserver* observer);
FsdpObserver* fsdp_observer();

class Communicator;
class Fsdp;

// For code outside FSDP that runs a list collective over gradients of FSDP-sharded parameters
// (the trainer's tensor-parallel reductions): tells the observer, if any, with each
// parameter's full size. No-op without an observer, a plan or peers in the group.
void note_shard_collective(const Fsdp* fsdp, const std::string& op, const Communicator& group,
                           const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& tensors);

}  // namespace titan
