// Async tensor parallelism and host-memory copies in the step replay (devices/step_replay.h):
// collective matmuls as chunked matmuls beside their collective's ring steps
// (devices/collective_matmul.h), and activation offload's copies over the chip's host link.
#include <vector>

#include "common/error.h"
#include "devices/step_replay.h"

namespace titan::devices::detail {

std::vector<int64_t> Replay::add_chunked(KernelSpan span, int64_t chunks, const std::vector<int64_t>& steps) {
  std::vector<int64_t> hosts;
  for (size_t i = span.begin; i < span.end; ++i) hosts.push_back(add_host(kernels_buf_[i]));
  std::vector<int64_t> ends;
  const double share = 1.0 / static_cast<double>(chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    if (c >= 1 && c - 1 < static_cast<int64_t>(steps.size())) next_compute_deps_.push_back(steps[c - 1]);
    for (size_t i = span.begin; i < span.end; ++i) {
      const Kernel& k = kernels_buf_[i];
      last_host_ = hosts[i - span.begin];
      const bool mm = k.category == op_kind_name(OpKind::kMatmul);
      add_compute(k, share, c == 0, mm ? static_cast<int>(kAsyncTpChunks) : static_cast<int>(k.basis));
    }
    ends.push_back(last_compute_);
  }
  last_host_ = hosts.back();
  for (size_t i = span.begin; i < span.end; ++i) count_kernel(kernels_buf_[i]);
  return ends;
}

bool Replay::decomposes(const CollectiveDesc& c) const {
  return options_.async_tensor_parallel && options_.collective_mode == CollectiveMode::kFused &&
         model_.overheads().async && decomposes_with_matmul(c) && tp_chunks(c) > 1;
}

int64_t Replay::tp_chunks(const CollectiveDesc& c) const {
  int64_t n = 1;
  for (const AxisSegment& seg : group(c.group)) n *= seg.count;
  return n;
}

std::vector<int64_t> Replay::add_ring_steps(const CollectiveDesc& c, const std::vector<int64_t>& deps, double launch_s) {
  const std::vector<AxisSegment>& segments = group(c.group);
  const CollectiveCost cost = collective_cost(placement_.topology, segments, c.kind, c.bytes);
  const int64_t steps = tp_chunks(c) - 1;
  const double share = 1.0 / static_cast<double>(steps);
  const bool chunked = c.kind == CollectiveKind::kReduceScatter && !scatter_chunks_.empty();
  std::vector<int64_t> ids;
  for (int64_t s = 0; s < steps; ++s) {
    TimelineTask& t = collective_task(c, segments, cost, share, s == 0 ? launch_s : 0.0, launch_s);
    if (chunked) {
      t.deps.assign(1, scatter_chunks_[static_cast<size_t>(s)]);
      for (int64_t d : deps)
        if (d != bucket_dep_) t.deps.push_back(d);  // the host's issue, not the compute before
    } else if (s == 0) {
      t.deps.assign(deps.begin(), deps.end());
    }
    ids.push_back(timeline_.add(t));
  }
  scatter_chunks_.clear();
  ++collectives_;
  return ids;
}

int64_t Replay::add_host_copy(const CollectiveDesc& c, const std::vector<int64_t>& deps) {
  const ChipSpec& chip = model_.chip();
  TITAN_CONFIG_CHECK(chip.is_host() || chip.host_link_bytes_per_s > 0, "activation offload on ", chip.name,
                     ": its chip file gives no [host] link_bytes_per_s (devices/chips/)");
  TimelineTask& t = fresh_task();
  t.stream = comm_stream(c.stream);
  t.deps.assign(deps.begin(), deps.end());
  t.duration_s = chip.is_host() ? 0.0 : static_cast<double>(c.bytes) / chip.host_link_bytes_per_s;
  t.category = collective_category(c);
  t.basis = kBandwidthBoundComm;
  ++collectives_;
  return timeline_.add(t);
}

}  // namespace titan::devices::detail
