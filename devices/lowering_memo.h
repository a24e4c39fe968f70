// Kernels remembered by the ops they were lowered from. A study replays one probe's traces at
// every dp_shard degree of a layout (trainer/simulate/shard_resize.h), and resizing rewrites
// the sizes of FSDP's shard-sized ops only: the block's matmuls, attention and elementwise
// chains between two collectives are the probe's ops at every degree, and lowering them
// (ComputeModel::lower: kernel costs, fused chains' byte counts over their data flow) gave
// the same kernels each time.
//
// A run of ops is named by its trace's ops_id (Trace::ops_id: every trace of that name holds
// the same ops, and the same of them marked OpDesc::resized), its first op's index and its
// length; the kernels it was lowered into are kept, with those that read a marked op (one of
// theirs or, for a chain, the matmul before it). A run found again gets the kept kernels, and
// the marked ones costed again from the ops at hand: which ops a kernel holds follows from
// the ops' kinds alone, and which tensors a fused chain moves through HBM from their data
// flow, both of which resizing leaves (a chain is costed from the uses it moved, ChainTraffic,
// without walking its data flow again). Runs of unnamed traces are lowered as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "devices/compute_cost.h"

namespace titan::devices {

// One chip and execution mode's lowerings (ComputeModel's): ReplayMemo::lowering keeps one per
// chip and mode. Not thread-safe: one per thread.
class LoweringMemo {
 public:
  // At most about `capacity` kernels are kept; past that it starts again empty (a study
  // evaluates a layout's points one after the other, so what repeats is recent).
  explicit LoweringMemo(size_t capacity = size_t{1} << 17) : capacity_(capacity) {}

  // model.lower(ops, out) for a run of the trace whose ops are named ops_id (0: unnamed).
  void lower(const ComputeModel& model, uint64_t ops_id, const std::vector<const OpDesc*>& ops,
             std::vector<Kernel>* out);

  int64_t hits = 0, misses = 0;  // runs found / lowered and kept

 private:
  struct Marked {  // a kernel that read a marked op
    uint32_t kernel = 0, begin = 0, end = 0;  // which, and its ops
    ChainTraffic traffic;  // a fused chain's: costed again from it (ComputeModel::recost_chain)
  };
  struct Run {
    size_t count = 0;  // ops
    std::vector<Kernel> kernels;
    std::vector<Marked> marked;
    int32_t next = -1;  // another run from the same first op (a collective moved between degrees)
  };
  struct PerTrace {
    int64_t base = -1;           // the trace's first op index (a pipeline segment's is its rank's)
    std::vector<int32_t> first;  // by first op index - base: its latest run, -1 none
    std::vector<Run> runs;
  };
  std::unordered_map<uint64_t, PerTrace> traces_;
  uint64_t last_id_ = 0;  // the trace of the last call, looked up once per trace's runs
  PerTrace* last_ = nullptr;
  size_t kernels_ = 0, capacity_;
};

}  // namespace titan::devices
