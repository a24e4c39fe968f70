// CollectiveMode: how collectives are issued, the question this project measures. One enum
// for the trainer's config, the collective layer (real runs) and the device simulator.
#pragma once

#include <string>

namespace titan {

enum class CollectiveMode {
  // Coalesced into buckets, issued asynchronously and overlapped with compute.
  kFused,
  // One blocking unit per collective: waits for prior work and runs alone.
  kSeparate,
};

const char* collective_mode_name(CollectiveMode mode);  // "fused" | "separate"
// Config error naming the valid spellings when s is neither.
CollectiveMode parse_collective_mode(const std::string& s);

}  // namespace titan
