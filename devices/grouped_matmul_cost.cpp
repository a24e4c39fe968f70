// Grouped GEMM (one kernel over many products, as mixture-of-experts layers run their experts:
// torch._grouped_mm in TorchTitan, cutlass GroupedGEMM in Megatron, megablox / ragged dot in
// MaxText): its op descriptor and its share of the matrix peak.
#include <algorithm>
#include <numeric>

#include "devices/compute_cost.h"

namespace titan::devices {

OpDesc grouped_matmul_op(const std::string& name, std::vector<MatmulShape> groups, int64_t dtype_bytes) {
  groups.erase(std::remove_if(groups.begin(), groups.end(),
                              [](const MatmulShape& s) { return s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0; }),
               groups.end());
  OpDesc op;
  op.name = name;
  op.kind = OpKind::kMatmul;
  op.dtype_bytes = dtype_bytes;
  for (const MatmulShape& s : groups) {
    const OpDesc one = matmul_op(name, s, dtype_bytes);
    op.flops += one.flops;
    op.bytes_read += one.bytes_read;
    op.bytes_written += one.bytes_written;
  }
  op.groups = std::move(groups);
  return op;
}

// matmul_efficiency's tile / wave model over the products' tiles together:
//   padded work = sum over products of tiles_p x T x T x ceil(k_p / T_k) T_k (x the CPU's
//   per-tile K-loop overhead, (k + k0) / k), the work the engines do with partial tiles full;
//   waves = ceil(sum tiles_p / U): the products' tiles fill the U engines' waves together, so
//   only the group's last wave runs partly empty (separate GEMMs each pay their own);
//   efficiency = clock x FLOPs / padded work x tiles / (waves U).
// Tiles of different depth (a weight gradient, whose K is each expert's token count) are taken
// at their mean cost per wave: the scheduler hands engines tiles as they free up.
// Too few tiles for the engines: K is split as for one GEMM, no deeper than the shallowest
// product allows.
double ComputeModel::grouped_matmul_efficiency(const std::vector<MatmulShape>& groups) const {
  const int64_t t = std::max<int64_t>(1, chip_.matmul_tile);
  const int64_t tk = chip_.matmul_tile_k > 0 ? chip_.matmul_tile_k : t;
  const int64_t units = std::max<int64_t>(1, chip_.matmul_units);
  double flops = 0, padded = 0;
  int64_t tiles = 0, min_k_steps = 0;
  for (const MatmulShape& s : groups) {
    if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0) continue;
    const int64_t p_tiles = s.batch * ((s.m + t - 1) / t) * ((s.n + t - 1) / t);
    const int64_t k_steps = (s.k + tk - 1) / tk;
    double tile_work = static_cast<double>(t) * static_cast<double>(t) * static_cast<double>(k_steps * tk);
    if (chip_.matmul_k_overhead > 0)
      tile_work *= (static_cast<double>(s.k) + chip_.matmul_k_overhead) / static_cast<double>(s.k);
    flops += static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    padded += static_cast<double>(p_tiles) * tile_work;
    tiles += p_tiles;
    min_k_steps = min_k_steps == 0 ? k_steps : std::min(min_k_steps, k_steps);
  }
  if (tiles == 0) return chip_.clock_ratio();
  if (tiles < units) tiles *= std::max<int64_t>(1, std::min(units / tiles, min_k_steps));
  const int64_t waves = (tiles + units - 1) / units;
  return chip_.clock_ratio() * flops / padded * static_cast<double>(tiles) / static_cast<double>(waves * units);
}

}  // namespace titan::devices
