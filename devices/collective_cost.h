// Alpha-beta cost of one collective on a placed process group (topology aware); used by the
// step simulator (step_simulator.h) and by anyone estimating a collective's time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "devices/placement.h"

namespace titan::devices {

// kHostCopy: a copy between the chip and its host's memory (activation offload), costed on the
// chip's host link (ChipSpec::host_link_bytes_per_s) by the step simulator, not on a group.
enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kBroadcast, kSendRecv, kHostCopy };

const char* collective_name(CollectiveKind kind);  // "all_gather", ...
// Accepts the names above (and "allgather", "send", "recv", ...); unknown = config error.
CollectiveKind parse_collective(const std::string& name);

struct CollectiveCost {
  double latency_s = 0;    // alpha: hops / algorithm steps x per-hop latency
  double bandwidth_s = 0;  // beta: bytes over achieved bandwidth along the group's axes
  int64_t group_size = 1;
  double total_s() const { return latency_s + bandwidth_s; }
};

// Cost of `kind` over the group occupying `segments` of `topology`. `bytes` is the size of
// the largest per-participant buffer, the nccl-tests convention:
//   all_gather: output (gathered) bytes     reduce_scatter: input (unreduced) bytes
//   all_reduce / broadcast: buffer bytes    all_to_all: bytes one participant sends in total
//   send_recv: message bytes
// Formulas (V = bytes, W_i = achieved bandwidth of segment i, see collective_cost.cpp):
//   AG = RS = sum over tiers of the multi-axis ring time, AR = 2 x AG, A2A = max over axes of
//   the bisection time, broadcast ~ pipelined AG, send/recv = V over one direction's link.
CollectiveCost collective_cost(const Topology& topology, const std::vector<AxisSegment>& segments,
                               CollectiveKind kind, int64_t bytes);

// Convenience: cost on a named group of a placement (see Placement::group).
CollectiveCost collective_cost(const Placement& placement, const std::string& group,
                               CollectiveKind kind, int64_t bytes);

// Achieved bandwidth W of one segment, per chip, counting both ring directions where the
// algorithm can use them (the "bidi" W of docs/hardware.md's rules of thumb).
double segment_bandwidth(const PhysicalAxis& axis, const AxisSegment& segment);

}  // namespace titan::devices
