// Collective cost model, scaling-book style. Notation for a group of N = n_1 * ... * n_k chips
// laid on segments i (n_i members along one physical axis, `stride` chips apart):
//   B_i  = datasheet bandwidth of one link (torus) or one switch port (switch), one direction
//   e_i  = achieved fraction of it (chip files: fabric.efficiency, scale_out.efficiency)
//   W_i  = achieved per-chip bandwidth a collective can use along segment i:
//          ring (torus axis that wraps, group spans it):  W = 2 e B / stride
//              (bidirectional ring: half the data each way)
//          line (no wraparound, or part of an axis):      W =   e B / stride
//              (the chips at the ends receive everything through one link: half as fast)
//          switch (NVSwitch, fat tree, DCN):             W =   e B
//              (each chip's port is the bottleneck; a non-blocking switch shares nothing)
//          "/ stride": a group whose members are `stride` chips apart shares every link on
//          its path with stride-1 interleaved groups doing the same collective.
//   alpha_i = per-hop latency; hops of a bidirectional ring n/2 * stride, of a line
//          (n-1) * stride; a switch runs tree / recursive-halving algorithms in ceil(log2 n)
//          steps when latency matters.
#include "devices/collective_cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/error.h"

namespace titan::devices {
namespace {

struct Piece {
  double w;      // W_i
  int64_t n;     // members along this segment
  double hops;   // per phase
  double alpha;  // per hop
  bool switched;
  double one_way;  // bandwidth of one direction (send/recv): e B / stride
  double stride;   // physical hops between neighbouring members (1 on a switch)
};

Piece piece(const Topology& t, const AxisSegment& s) {
  TITAN_CHECK(s.axis >= 0 && s.axis < static_cast<int>(t.axes.size()), "bad axis index ", s.axis);
  const PhysicalAxis& a = t.axes[s.axis];
  Piece p;
  p.w = segment_bandwidth(a, s);
  p.n = s.count;
  p.alpha = a.hop_latency_s;
  p.switched = a.switched;
  p.stride = a.switched ? 1.0 : static_cast<double>(s.stride);
  if (a.switched) {
    p.hops = std::ceil(std::log2(static_cast<double>(s.count)));
    p.one_way = a.efficiency * a.link_bytes_per_s;
  } else {
    bool ring = a.wraparound && s.count * s.stride == a.size && s.count >= 3;
    p.hops = static_cast<double>(ring ? s.count / 2 : s.count - 1) * static_cast<double>(s.stride);
    p.one_way = a.efficiency * a.link_bytes_per_s / static_cast<double>(s.stride);
  }
  return p;
}

// Bandwidth time of an all-gather of V bytes (output size) inside one tier:
//   T = max( (N-1)/N * V / sum_i W_i ,  max_i (n_i - 1)/N * V / W_i )
// First term: every chip must receive (N-1)/N of V through all its links together (the
// scaling book's "spreading over k axes divides the time by k"). Second term: every byte
// must cross axis i once per other coordinate along it, (n_i - 1) * V bytes in all, over the
// N * W_i of capacity that axis has; it dominates when one axis is much slower.
// One axis: both terms give (n-1)/n * V / W, the ring formula.
double tier_allgather(const std::vector<Piece>& ps, double v) {
  if (ps.empty() || v <= 0) return 0;
  double n = 1, wsum = 0, worst_axis = 0;
  for (const Piece& p : ps) {
    n *= static_cast<double>(p.n);
    wsum += p.w;
  }
  for (const Piece& p : ps)
    worst_axis = std::max(worst_axis, (static_cast<double>(p.n) - 1) / n * v / p.w);
  return std::max((n - 1) / n * v / wsum, worst_axis);
}

double tier_size(const std::vector<Piece>& ps) {
  double n = 1;
  for (const Piece& p : ps) n *= static_cast<double>(p.n);
  return n;
}

double latency(const std::vector<Piece>& ps) {
  double l = 0;
  for (const Piece& p : ps) l += p.hops * p.alpha;
  return l;
}

}  // namespace

double segment_bandwidth(const PhysicalAxis& a, const AxisSegment& s) {
  double b = a.efficiency * a.link_bytes_per_s;
  if (a.switched) return b;
  bool ring = a.wraparound && s.count * s.stride == a.size && s.count >= 3;
  return (ring ? 2.0 : 1.0) * b / static_cast<double>(s.stride);
}

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kSendRecv: return "send_recv";
    case CollectiveKind::kHostCopy: return "host_copy";
  }
  return "?";
}

CollectiveKind parse_collective(const std::string& name) {
  std::string s;
  for (char c : name)
    if (c != '_' && c != '-') s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "allgather" || s == "allgatherintotensor") return CollectiveKind::kAllGather;
  if (s == "reducescatter" || s == "reducescattertensor") return CollectiveKind::kReduceScatter;
  if (s == "allreduce") return CollectiveKind::kAllReduce;
  if (s == "alltoall" || s == "alltoallsingle") return CollectiveKind::kAllToAll;
  if (s == "broadcast") return CollectiveKind::kBroadcast;
  if (s == "sendrecv" || s == "send" || s == "recv" || s == "p2p") return CollectiveKind::kSendRecv;
  if (s == "hostcopy") return CollectiveKind::kHostCopy;
  TITAN_CONFIG_FAIL("unknown collective '", name,
                    "' (known: all_gather reduce_scatter all_reduce all_to_all broadcast send_recv host_copy)");
}

CollectiveCost collective_cost(const Topology& t, const std::vector<AxisSegment>& segments,
                               CollectiveKind kind, int64_t bytes) {
  CollectiveCost c;
  std::vector<Piece> fast, slow;
  for (const AxisSegment& s : segments) {
    if (s.count <= 1) continue;
    (t.axes[s.axis].scale_out ? slow : fast).push_back(piece(t, s));
    c.group_size *= s.count;
  }
  if (c.group_size <= 1 || bytes <= 0) return c;
  const double v = static_cast<double>(bytes);
  const double n_fast = tier_size(fast);
  const double lat = latency(fast) + latency(slow);

  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      // Hierarchical: AG runs the scale-out stage first on the slice-local shard (V / n_fast
      // bytes, so the n_fast chips of a slice share the slow traffic), then the fast stage on
      // the full V; RS runs the same stages in reverse. Stages are sequential.
      //   T = T_fast(V) + T_slow(V / n_fast)
      c.bandwidth_s = tier_allgather(fast, v) + tier_allgather(slow, v / n_fast);
      c.latency_s = lat;
      break;
    case CollectiveKind::kAllReduce:
      // AR = reduce-scatter + all-gather of the same buffer: 2 x the AG time (~2V/W on a ring).
      c.bandwidth_s = 2 * (tier_allgather(fast, v) + tier_allgather(slow, v / n_fast));
      c.latency_s = 2 * lat;
      break;
    case CollectiveKind::kBroadcast:
      // Pipelined broadcast: the root's data streams through the group at the AG rate, but
      // all of V (not (N-1)/N of it) reaches every chip: T = V / sum W (+ slow stage on V/n).
      {
        double wf = 0, ws = 0;
        for (const Piece& p : fast) wf += p.w;
        for (const Piece& p : slow) ws += p.w;
        c.bandwidth_s = (wf > 0 ? v / wf : 0) + (ws > 0 ? v / n_fast / ws : 0);
        c.latency_s = lat;
      }
      break;
    case CollectiveKind::kAllToAll:
      // Bisection bound per axis, all axes concurrently (dimension-ordered routing):
      //   torus (ring or line) segment: T_i = V * n_i / (4 W_i)
      //     each chip sends V/n_i to each member, ~n_i/4 hops away on a bidirectional ring
      //     (n_i/2 on a line, whose W is half): byte-hops V n_i / 4 over W_i per chip.
      //     = docs/hardware.md's V_total/(4W) with V_total = n_i * V the whole array.
      //   switch segment: T_i = (n_i - 1)/n_i * V / W_i (everything leaves through the port)
      //   T = max_i T_i
      for (const std::vector<Piece>* tier : {&fast, &slow})
        for (const Piece& p : *tier) {
          double n = static_cast<double>(p.n);
          double ti = p.switched ? (n - 1) / n * v / p.w : v * n / (4 * p.w);
          c.bandwidth_s = std::max(c.bandwidth_s, ti);
        }
      c.latency_s = lat;
      break;
    case CollectiveKind::kSendRecv: {
      // Point-to-point to the neighbouring member (pipeline stages): V over one direction of
      // one link (strided: shared by the interleaved pairs); the slowest segment the group
      // spans sets the pace (a stage boundary that crosses DCN). Latency: one neighbour step.
      double worst = 0, alpha = 0;
      for (const std::vector<Piece>* tier : {&fast, &slow})
        for (const Piece& p : *tier) {
          worst = std::max(worst, v / p.one_way);
          alpha = std::max(alpha, p.alpha * p.stride);
        }
      c.bandwidth_s = worst;
      c.latency_s = alpha;
      break;
    }
    case CollectiveKind::kHostCopy:
      break;  // no group: the step simulator costs it on the chip's host link
  }
  return c;
}

CollectiveCost collective_cost(const Placement& placement, const std::string& group,
                               CollectiveKind kind, int64_t bytes) {
  return collective_cost(placement.topology, placement.group(group), kind, bytes);
}

}  // namespace titan::devices
