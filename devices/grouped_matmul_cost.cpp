// Grouped GEMM (one kernel over many products, as mixture-of-experts layers run their experts:
// torch._grouped_mm in TorchTitan, cutlass GroupedGEMM in Megatron, megablox / ragged dot in
// MaxText): its op descriptor and its share of the matrix peak.
#include <algorithm>
#include <numeric>

#include "devices/compute_cost.h"
#include "devices/matmul_tiles.h"

namespace titan::devices {

OpDesc grouped_matmul_op(InternedName name, std::vector<MatmulShape> groups, int64_t dtype_bytes) {
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

// matmul_efficiency's tile / wave model (devices/matmul_tiles.h) over the products' tiles
// together:
//   padded work = sum over products of their padded work (partial tiles full, the CPU's K-loop
//   overhead included);
//   wave fill of sum tiles_p: the products' tiles fill the U engines' waves together, so only
//   the group's last wave runs partly empty (separate GEMMs each pay their own);
//   efficiency = clock x sum FLOPs / sum padded work x wave fill.
// Tiles of different depth (a weight gradient, whose K is each expert's token count) are taken
// at their mean cost per wave: the scheduler hands engines tiles as they free up.
// Too few tiles for the engines: K is split as for one GEMM, no deeper than the shallowest
// product allows.
double ComputeModel::grouped_matmul_efficiency(const std::vector<MatmulShape>& groups) const {
  const TileGrid grid = tile_grid(chip_);
  double flops = 0, padded = 0;
  int64_t tiles = 0, min_k_steps = 0;
  for (const MatmulShape& s : groups) {
    if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0) continue;
    const ProductTiles p = product_tiles(s, grid);
    flops += p.flops;
    padded += p.padded;
    tiles += p.tiles;
    min_k_steps = min_k_steps == 0 ? p.k_steps : std::min(min_k_steps, p.k_steps);
  }
  if (tiles == 0) return chip_.clock_ratio();
  return chip_.clock_ratio() * flops / padded * wave_fill(tiles, min_k_steps, grid.units);
}

}  // namespace titan::devices
