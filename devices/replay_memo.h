// Replays remembered by everything that decides them. A study replays the same trace on the
// same chip many times: a layout is recorded once and resized to every dp_shard degree
// (trainer/simulate/shard_resize.h), and resizing leaves many of a pipeline rank's segments
// as the probe recorded them (those that hold no shard-sized tensor and no FSDP collective),
// while the layout's points at successive chip counts replay them again.
//
// A replay (simulate_step, simulate_step_time) is a function of the trace's events, the chip,
// the options and, for each group its collectives use, that group's axis segments of more than
// one member and the physical axes under them (what collective_cost reads, and the links the
// timeline shares). Only named traces are remembered (Trace::content_id: a probe's final
// events, a name resizing drops where it changes sizes); the chip is compared in full, and the
// options and the groups' segments are hashed (128 bits). The report's topology and layout
// strings, which name the whole placement, are filled from the placement asked about. Not
// remembered: timeline events (keep_events) and async tensor parallelism (its chunked
// collectives read more of the group).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "devices/chip_catalog.h"
#include "devices/lowering_memo.h"
#include "devices/placement.h"
#include "devices/trace.h"

namespace titan::devices {

struct SimulationOptions;
struct StepReport;

// True when every field of a and b is equal.
bool same_chip(const ChipSpec& a, const ChipSpec& b);

// Not thread-safe: one per thread (a study's evaluating threads each keep their own).
class ReplayMemo {
 public:
  // At most `capacity` replays are kept; past that the memo starts again empty (a study
  // evaluates a layout's points one after the other, so what repeats is recent).
  explicit ReplayMemo(size_t capacity = 8192);
  ~ReplayMemo();

  struct Key {
    size_t chip = 0;          // into chips_
    uint64_t trace = 0;       // Trace::content_id
    uint64_t a = 0, b = 0;    // the options and the groups' placement, hashed
  };
  // The key of replaying `trace` so; none when it is not remembered (an unnamed trace, events
  // kept, async tensor parallelism).
  std::optional<Key> key(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                         const SimulationOptions& options, bool time_only);
  // The remembered replay, or nullptr; each lookup counts as a hit or a miss.
  const StepReport* report(const Key& key);
  const double* step_time(const Key& key);
  void keep(const Key& key, const StepReport& report);
  void keep(const Key& key, double step_time_s);

  // The lowerings kept for this chip and execution mode (devices/lowering_memo.h); the
  // reference stays valid for the memo's life.
  LoweringMemo& lowering(const ChipSpec& chip, ExecutionMode mode);

  int64_t hits = 0, misses = 0;

 private:
  struct Setting {
    uint64_t a = 0, b = 0;
    bool operator==(const Setting& o) const { return a == o.a && b == o.b; }
  };
  struct SettingHash {
    size_t operator()(const Setting& s) const { return static_cast<size_t>(s.a); }
  };
  struct PerTrace {
    std::vector<const std::string*> groups;  // its collectives' groups, by interned name
    std::unordered_map<Setting, std::unique_ptr<StepReport>, SettingHash> reports;
    std::unordered_map<Setting, double, SettingHash> times;
  };
  struct PerChip {
    ChipSpec chip;
    std::unordered_map<uint64_t, PerTrace> traces;
  };
  PerTrace* find(const Key& key);

  size_t capacity_;
  size_t size_ = 0;
  std::vector<std::unique_ptr<PerChip>> chips_;
  struct Lowerings {
    ChipSpec chip;
    ExecutionMode mode;
    LoweringMemo memo;
  };
  std::vector<std::unique_ptr<Lowerings>> lowerings_;  // not emptied with chips_: replays hold them
};

}  // namespace titan::devices
