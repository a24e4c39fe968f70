// Topology: the physical axes (torus rings, switch domains, scale-out networks) that a set of
// chips forms; used by placement.h to map mesh dims onto hardware, and by the report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "devices/chip_catalog.h"

namespace titan::devices {

// One physical axis. Chips are numbered with the first axis varying fastest, so axes[0] is
// the innermost (TP-friendly) axis and scale-out axes come last.
struct PhysicalAxis {
  std::string name;   // "x", "y", "z" (torus), "nvlink"/"neuronlink"/"shm" (switch), "dcn",
                      // "efa", "ib", "tcp" (scale-out)
  int64_t size = 1;
  // true: every chip reaches every other through a non-blocking switch (NVSwitch, a full-
  // bisection fat tree, DCN between slices): no hop distance, no shared links.
  bool switched = false;
  bool wraparound = false;  // torus axis whose ring closes (meaningless when switched)
  bool scale_out = false;   // leaves the fast domain (DCN/EFA/IB): the slow tier
  // Torus: one link, one direction, between neighbours on this axis.
  // Switched: one chip's port into the switch, one direction.
  double link_bytes_per_s = 0;
  double efficiency = 1;     // achieved fraction of link_bytes_per_s
  double hop_latency_s = 0;  // per hop (torus) or per algorithm step (switch)
};

struct Topology {
  std::string device;
  int64_t num_chips = 0;
  std::string shape;        // canonical string, e.g. "16x16x32", "8x16x16x32" (slices first)
  std::vector<PhysicalAxis> axes;  // innermost first
  std::string describe() const;   // e.g. "16x16x32 ICI 3D torus (wrap x y z), 1 slice"
};

// Builds the topology of `num_chips` chips of `chip`. An empty `shape` chooses automatically
// (the most cubic valid slice; several slices over the scale-out network when the chips
// exceed the largest slice). A user shape is validated against chip count and generation:
//   TPU 3D  "AxBxC" one slice, "SxAxBxC" S slices over DCN   (e.g. "16x16x32")
//   TPU 2D  "AxB" one slice, "SxAxB" S slices over DCN        (e.g. "16x16")
//   trn1/2  "AxB" within an instance (<= 4x4), trn2 "4x4xR" R instances on the UltraServer
//           ring (R <= 4), "Nx4x4xR" N of those over EFA
//   GPU/trn3/cpu  "D" or "nvlD" (switch domain of D chips, e.g. "nvl72" for GB200), "NxD"
// Errors are config errors naming what cannot hold the chips.
Topology make_topology(const ChipSpec& chip, int64_t num_chips, const std::string& shape = "");

// All valid single-slice shapes (innermost first) for `slice_chips` chips of a TPU or Trainium
// generation; used by the automatic choice and by the mesh-aware choice in placement.h.
std::vector<std::vector<int64_t>> valid_slice_shapes(const ChipSpec& chip, int64_t slice_chips);

// Builds the topology for an explicit slice shape and slice count (no search).
Topology make_topology_from_dims(const ChipSpec& chip, const std::vector<int64_t>& slice_dims,
                                 int64_t slices);

}  // namespace titan::devices
