// Memory per chip of a training layout, from its recorded step (devices/trace_memory.h):
// what outlives the step (parameters, gradients, optimizer state), the peak of the step's own
// tensors (activations and saved tensors, logits, FSDP's gathered buffers) and the runtime's
// reserve; whether it fits in the chip's HBM. Used by the trainer's simulated report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "devices/chip_catalog.h"
#include "devices/trace_memory.h"

namespace titan::devices {

struct MemoryReport {
  // params and optimizer from the stored element counts; grads: the rest of what outlives
  // the step (gradients and small state); activations and collective buffers: the step's own
  // tensors at its peak.
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, collective_buffers = 0, runtime_reserve = 0;
  int64_t total = 0;
  int64_t capacity = 0;
  bool fits = false;
  std::vector<std::pair<std::string, int64_t>> peak_by_op;  // TraceMemory::peak_by_op
  double total_gib() const { return static_cast<double>(total) / kGiB; }
  std::string describe() const;  // "41.2 GiB of 192.0 GiB: params 2.0, grads 2.0, ..."
  // Every part with its bytes, largest first.
  std::vector<std::pair<std::string, int64_t>> consumers() const;
};

// One chip's memory: m from its recorded step; param_bytes and optimizer_bytes what its
// stored parameters and optimizer states take (both inside m.state_bytes).
MemoryReport memory_of_step(const TraceMemory& m, int64_t param_bytes, int64_t optimizer_bytes, const ChipSpec& chip);

// A layout that does not fit is refused: a config error giving the total against the
// capacity and naming the largest consumers and the ops whose tensors fill the peak (no step
// time is reported for it). `what` describes the layout ("8192 x tpu-v7, dp_shard 8192");
// `advice` ends the ops' list (a cheaper activation checkpointing that would fit, say).
void require_fits(const MemoryReport& r, const std::string& what, const std::string& advice = "");

}  // namespace titan::devices
