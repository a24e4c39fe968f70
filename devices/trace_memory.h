// Memory of a recorded step, from the step itself: a walk over its ops in program order that
// keeps every storage live from the first op that touches it to the last (the allocator
// frees a tensor once its last user is done), storages still referenced after the step as
// state, and the buffers a parallel plan frees and refills outside any op (FSDP's gathered
// parameters, and the gradients an async reduce-scatter reads until it completes) at the sizes
// it gave them. What the walk cannot see: allocator fragmentation and rounding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "devices/step_simulator.h"

namespace titan::devices {

struct TraceMemory {
  int64_t state_bytes = 0;       // storages that outlive the step (parameters, gradients, optimizer state)
  int64_t peak_bytes = 0;        // most bytes of the step's own storages live at once
  int64_t peak_temporaries = 0;  // of which tensors the ops made (activations, saved tensors, logits)
  int64_t peak_resized = 0;      // of which storages resized outside ops (FSDP's gathered buffers)
  int64_t peak_op = -1;          // compute op number at the peak (-1: not known, an extrapolated step)
  // The peak within each part walked (trace_memory over parts; one part for a whole trace),
  // split the same way: a pipeline rank's peak moves between its segments as the model
  // deepens, each segment's own unfused peak does not (trainer/simulate/layer_extrapolation.h;
  // the fused one can, so pipeline ranks are reported unfused, trainer/simulate/simulate.cpp).
  struct Part {
    int64_t temporaries = 0, resized = 0;
  };
  std::vector<Part> parts;
  // The temporaries live at the peak, by the op that made them (first touched them), largest
  // first: what to checkpoint or shard when a layout does not fit.
  std::vector<std::pair<std::string, int64_t>> peak_by_op;
};

// One storage over a stretch of the step at one size: the walk's input, kept apart so that a
// recording whose sizes are rewritten (trainer/simulate/shard_resize.h) walks again without
// going over its ops.
struct LiveRange {
  enum class Kind : uint8_t { kState, kTemporary, kResized };
  Kind kind = Kind::kTemporary;
  uint32_t maker = 0;     // LiveRanges::makers index: the op that first touched it
  int64_t id = 0;         // TensorUse::id
  int64_t from = 0, to = 0;  // compute ops [from, to) it is live over (state: the whole step)
  int64_t bytes = 0;
  // Made and last used inside one run of element-wise ops: where those run fused (compiled,
  // defer_and_fuse) it stays in registers and is never allocated.
  bool inside_fusion = false;
  // kResized: the first op that touches it inside [from, to) and one past the last (equal:
  // none does), for a compiler that schedules each gathered weight and gradient buffer around
  // its own uses (walk_memory's per_use).
  int64_t use_from = 0, use_to = 0;
  // kTemporary, for a compiler that schedules the whole step (XLA; walk_memory's per_use):
  // cast_of: the storage this one is a widening cast of (a bf16 tensor copied to fp32, as a
  // norm or the loss upcasts its input), 0 if none. XLA fuses a convert into each consumer,
  // so the fp32 copy is never stored; its narrower source stays live until the copy's last
  // use instead. idle_from < idle_to: a matmul's output (a weight gradient) untouched until
  // an add accumulates the next contribution into it (a tied weight's two uses, autograd
  // summing them at full size before FSDP reduce-scatters the sum); XLA reduce-scatters each
  // use's gradient where it is made and sums the shards, so the full-size gradient holds no
  // memory between its first contribution and the next.
  int64_t cast_of = 0;
  int64_t idle_from = 0, idle_to = 0;
};
struct LiveRanges {
  int64_t ops = 0;
  size_t storages = 0, resizes = 0;  // the tables walked (a reuse checks it walked the same)
  std::vector<int64_t> part_begins;  // first op of each part
  std::vector<LiveRange> ranges;
  std::vector<std::string> makers;
};

// A recording whose ops come in parts (a pipeline rank's segments, in program order), with
// the storage table and resizes of the whole (resize positions count the ops of every part).
LiveRanges live_ranges(const std::vector<const Trace*>& parts, const std::vector<StorageRecord>& storages,
                       const std::vector<StorageResize>& resizes);
// A range's bytes other than its own: how a recording whose sizes are rewritten
// (trainer/simulate/shard_resize.h) walks the ranges it shares with the recording it came from.
struct ByteOverride {
  uint32_t index = 0;  // into LiveRanges::ranges
  int64_t bytes = 0;
};

// fused: element-wise runs execute as fused kernels (ExecutionOverheads::fuse_elementwise),
// so the temporaries inside them take no memory. overrides: by increasing index, at most one
// per range (titan::Error otherwise). per_use: the buffers a parallel plan resizes (FSDP's
// gathered weights, a reduce-scatter's input) hold memory only from their first to their last
// use in each stretch, and the next of them to be used is counted from the op before (one
// gather in flight ahead of its use): how XLA schedules a whole step's per-weight all-gathers and reduce-scatters
// (MaxText), where FSDP2 gathers and reduces a whole block at a time (docs/memory.md); with
// it, XLA's other buffer rules apply too: widening casts fused into their consumers and a
// tied weight's gradient reduce-scattered per use (LiveRange::cast_of, idle_from).
TraceMemory walk_memory(const LiveRanges& live, bool fused = false, const std::vector<ByteOverride>& overrides = {},
                        bool per_use = false);

// The memory of a recording run unfused (eager) and fused. Each is walked when it is first
// asked for, and kept: a replay asks for one of them, and a study resizes a recording far
// more often than it replays both modes. Copies share the ranges and the walks; thread-safe.
class StepMemory {
 public:
  StepMemory() = default;  // nothing walked: both modes read empty
  explicit StepMemory(std::shared_ptr<const LiveRanges> live, std::vector<ByteOverride> overrides = {});
  const TraceMemory& of(bool fused_elementwise, bool per_use = false) const;
  const TraceMemory& eager() const { return of(false); }
  const TraceMemory& fused() const { return of(true); }
  // The ranges walked, when they are the recording's own (no byte overrides); else null.
  std::shared_ptr<const LiveRanges> own_ranges() const;

 private:
  struct Walks;
  std::shared_ptr<Walks> walks_;
};
inline StepMemory step_memory(LiveRanges live) { return StepMemory(std::make_shared<const LiveRanges>(std::move(live))); }
inline StepMemory trace_memory(const std::vector<const Trace*>& parts, const std::vector<StorageRecord>& storages,
                               const std::vector<StorageResize>& resizes) {
  return step_memory(live_ranges(parts, storages, resizes));
}
inline StepMemory trace_memory(const Trace& t) { return trace_memory({&t}, t.storages(), t.storage_resizes()); }

}  // namespace titan::devices
