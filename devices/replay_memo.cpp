// Remembered replays (see replay_memo.h).
#include "devices/replay_memo.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "devices/step_simulator.h"

namespace titan::devices {

// The key reads every field of these: a field added to one of them must be keyed (or the
// chip compared) below before this builds again.
static_assert(sizeof(AxisSegment) == 32 && sizeof(PhysicalAxis) == 72,
              "a placement struct changed: key what collective_cost reads of it in ReplayMemo::key");
static_assert(sizeof(SimulationOptions) == 32, "SimulationOptions changed: key the new option in ReplayMemo::key");
static_assert(sizeof(ChipSpec) == 736, "ChipSpec changed: compare the new field in same_chip");

namespace {

// Two lanes of a multiply-rotate round (xxHash's), seeded apart, finished with splitmix64's
// avalanche: the options and group placements a named trace was replayed with, in 128 bits, so
// that no two settings a study meets collide.
class Hasher {
 public:
  void add(uint64_t v) {
    a_ = rotl(a_ + v * kP2, 31) * kP1;
    b_ = rotl(b_ ^ (v * kP3), 27) * kP4 + kP5;
  }
  void add(int64_t v) { add(static_cast<uint64_t>(v)); }
  void add(double v) {
    uint64_t u;
    std::memcpy(&u, &v, sizeof u);
    add(u);
  }
  void add(bool v) { add(static_cast<uint64_t>(v)); }
  void add(const void* p) { add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  std::pair<uint64_t, uint64_t> value() const { return {finish(a_), finish(b_ ^ a_)}; }

 private:
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t finish(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL,
                            kP3 = 0x165667B19E3779F9ULL, kP4 = 0x85EBCA77C2B2AE63ULL,
                            kP5 = 0x27D4EB2F165667C5ULL;
  uint64_t a_ = 0x243F6A8885A308D3ULL, b_ = 0x13198A2E03707344ULL;
};

}  // namespace

bool same_chip(const ChipSpec& a, const ChipSpec& b) {
  auto fields = [](const ChipSpec& c) {
    return std::tie(c.name, c.description, c.family, c.peak_bf16_flops, c.peak_clock_hz, c.sustained_clock_hz,
                    c.sustained_clock_from, c.borrowed_clock_ratio, c.fitted_clock_share, c.hbm_bytes,
                    c.hbm_bytes_per_s, c.hbm_efficiency, c.host_link_bytes_per_s, c.fast_fabric,
                    c.link_bytes_per_s, c.links, c.fast_domain_chips, c.max_slice_chips, c.hop_latency_s,
                    c.torus_dims, c.wraparound, c.wrap_edge, c.scale_out_fabric, c.scale_out_bytes_per_s,
                    c.scale_out_latency_s, c.link_efficiency, c.scale_out_efficiency, c.matmul_tile,
                    c.matmul_tile_k, c.matmul_units, c.attention_peak_fraction, c.vector_peak_fraction,
                    c.comm_units, c.comm_memory_traffic, c.eager_host_per_op_s, c.eager_launch_s,
                    c.defer_host_per_op_s, c.defer_launch_s, c.compiled_host_per_op_s, c.compiled_launch_s,
                    c.separate_collective_launch_s, c.compiled_fuses_matmul_epilogue, c.compiled_covers_step,
                    c.cpu_op_overhead_s, c.cpu_view_overhead_s, c.fused_attention, c.host_fused_kernels,
                    c.matmul_rate_measured, c.kernel_rates, c.cache_bytes, c.cache_bytes_per_s,
                    c.serial_kernels, c.matmul_k_overhead, c.tdp_w, c.idle_w, c.host_w_per_chip,
                    c.network_w_per_chip, c.chip_mtbf_s, c.host_mtbf_s, c.link_mtbf_s, c.software_mtbf_s,
                    c.replace_chips, c.file, c.sources);
  };
  return fields(a) == fields(b);
}

ReplayMemo::ReplayMemo(size_t capacity) : capacity_(capacity) {}
ReplayMemo::~ReplayMemo() = default;

std::optional<ReplayMemo::Key> ReplayMemo::key(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                                               const SimulationOptions& options, bool time_only) {
  if (trace.content_id() == 0 || options.keep_events || options.async_tensor_parallel) return std::nullopt;
  if (size_ >= capacity_) chips_.clear(), size_ = 0;
  Key k;
  k.trace = trace.content_id();
  k.chip = chips_.size();
  for (size_t i = 0; i < chips_.size() && k.chip == chips_.size(); ++i)
    if (same_chip(chips_[i]->chip, chip)) k.chip = i;
  if (k.chip == chips_.size()) {
    chips_.push_back(std::make_unique<PerChip>());
    chips_.back()->chip = chip;
  }
  auto [it, added] = chips_[k.chip]->traces.try_emplace(k.trace);
  PerTrace& t = it->second;
  if (added) {
    for (const TraceEvent& e : trace.events()) {
      if (e.type != TraceEvent::Type::kIssue || e.collective.kind == CollectiveKind::kHostCopy) continue;
      const std::string* g = &e.collective.group.str();
      if (std::find(t.groups.begin(), t.groups.end(), g) == t.groups.end()) t.groups.push_back(g);
    }
  }
  Hasher h;
  h.add(time_only);
  h.add(static_cast<uint64_t>(options.execution)), h.add(static_cast<uint64_t>(options.collective_mode));
  h.add(options.separate_launch_s), h.add(options.exposed_by_kind), h.add(options.p2p_posted);
  // What collective_cost reads of the placement: the segments of more than one member and
  // their physical axes (a segment of one is skipped there and shares no link).
  for (const std::string* g : t.groups) {
    h.add(static_cast<const void*>(g));
    for (const AxisSegment& s : placement.group(*g)) {
      if (s.count <= 1) continue;
      const PhysicalAxis& a = placement.topology.axes.at(static_cast<size_t>(s.axis));
      h.add(static_cast<int64_t>(s.axis)), h.add(s.count), h.add(s.stride), h.add(s.ring);
      h.add(a.size), h.add(a.switched), h.add(a.wraparound), h.add(a.scale_out);
      h.add(a.link_bytes_per_s), h.add(a.efficiency), h.add(a.hop_latency_s);
    }
    h.add(~uint64_t{0});
  }
  std::tie(k.a, k.b) = h.value();
  return k;
}

LoweringMemo& ReplayMemo::lowering(const ChipSpec& chip, ExecutionMode mode) {
  for (const auto& l : lowerings_)
    if (l->mode == mode && same_chip(l->chip, chip)) return l->memo;
  lowerings_.push_back(std::make_unique<Lowerings>(Lowerings{chip, mode, LoweringMemo()}));
  return lowerings_.back()->memo;
}

ReplayMemo::PerTrace* ReplayMemo::find(const Key& key) {
  if (key.chip >= chips_.size()) return nullptr;
  auto& traces = chips_[key.chip]->traces;
  auto it = traces.find(key.trace);
  return it == traces.end() ? nullptr : &it->second;
}

const StepReport* ReplayMemo::report(const Key& key) {
  const StepReport* kept = nullptr;
  if (const PerTrace* t = find(key)) {
    auto it = t->reports.find(Setting{key.a, key.b});
    if (it != t->reports.end()) kept = it->second.get();
  }
  ++(kept ? hits : misses);
  return kept;
}

const double* ReplayMemo::step_time(const Key& key) {
  const double* kept = nullptr;
  if (const PerTrace* t = find(key)) {
    auto it = t->times.find(Setting{key.a, key.b});
    if (it != t->times.end()) kept = &it->second;
  }
  ++(kept ? hits : misses);
  return kept;
}

void ReplayMemo::keep(const Key& key, const StepReport& report) {
  PerTrace* t = find(key);
  if (!t) return;
  auto kept = std::make_unique<StepReport>(report);
  kept->topology.clear(), kept->layout.clear();  // the placement's: filled per lookup
  if (t->reports.emplace(Setting{key.a, key.b}, std::move(kept)).second) ++size_;
}

void ReplayMemo::keep(const Key& key, double step_time_s) {
  PerTrace* t = find(key);
  if (t && t->times.emplace(Setting{key.a, key.b}, step_time_s).second) ++size_;
}

}  // namespace titan::devices
