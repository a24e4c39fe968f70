// Placement of a parallel mesh (pp, dp_replicate, dp_shard, cp, tp) onto a Topology's physical
// axes; used by collective_cost.h to cost a collective on a mesh dim, and by the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "devices/topology.h"

namespace titan::devices {

// One mesh dimension, listed outermost first as ParallelDims orders them (TP last/innermost).
struct MeshDim {
  std::string name;
  int64_t degree = 1;
};

// The part of one physical axis that a mesh dim's group occupies: `count` members spaced
// `stride` chips apart along axis `axis` (index into Topology::axes).
struct AxisSegment {
  int axis = 0;
  int64_t count = 1;
  int64_t stride = 1;
  // The members close a ring: the axis wraps and the group spans it (count * stride == size).
  bool ring = false;
};

struct Placement {
  Topology topology;
  std::vector<MeshDim> mesh;                       // as given (outermost first)
  std::vector<std::vector<AxisSegment>> segments;  // per mesh dim, innermost axis first

  // Segments of a group: a mesh dim name ("tp"), several joined by '+' ("dp_shard+cp"), or a
  // flattened name the trainer uses: "dp" = dp_replicate+dp_shard, "dp_shard_cp" =
  // dp_shard+cp, "dp_cp" / "loss" = dp_replicate+dp_shard+cp, "world" = every dim.
  // "pp_ends": the first and the last pipeline rank (a tied embedding's gradient sum).
  // Expert parallelism's groups, which split dp_shard x cp: "ep<N>" = its N innermost ranks
  // (the experts' token exchange), "efsdp<M>" = the M ranks at the same place in each block of
  // those (the experts' FSDP group); N x M must be the dp_shard x cp size.
  // An unknown name is a config error listing the mesh dims.
  std::vector<AxisSegment> group(const std::string& name) const;
  std::vector<AxisSegment> pipeline_ends() const;  // the "pp_ends" pair
  std::vector<AxisSegment> split_group(const std::string& base, int64_t n, bool inner, const std::string& name) const;
  int64_t group_size(const std::string& name) const;
  std::string describe() const;  // e.g. "tp=4 -> x[4 line]; dp_shard=2048 -> x[4 stride 4 ring] y[16 ring] ..."
};

// Lays mesh dims on axes innermost first: the last mesh dim (TP) takes the innermost axis,
// splitting an axis when a degree is smaller than it. Errors (config): degrees whose product
// differs from the topology's chip count; a degree that cannot be aligned with the axes.
Placement place_mesh(const Topology& topology, const std::vector<MeshDim>& mesh);

// Topology + placement in one call. With an empty `shape`, TPU and Trainium slices are chosen
// mesh-aware: among the valid shapes for the automatic slice count, the one that splits the
// fewest physical axes between mesh dims (so TP gets whole rings), then the most cubic.
Placement place_on_device(const ChipSpec& chip, int64_t num_chips, const std::vector<MeshDim>& mesh,
                          const std::string& shape = "");

}  // namespace titan::devices
