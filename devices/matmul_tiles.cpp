// Tile / wave model of matrix products (devices/matmul_tiles.h).
#include "devices/matmul_tiles.h"

#include <algorithm>

namespace titan::devices {

TileGrid tile_grid(const ChipSpec& chip) {
  TileGrid g;
  g.tile = std::max<int64_t>(1, chip.matmul_tile);
  g.tile_k = chip.matmul_tile_k > 0 ? chip.matmul_tile_k : g.tile;
  g.units = std::max<int64_t>(1, chip.matmul_units);
  g.k_overhead = std::max(0.0, chip.matmul_k_overhead);
  return g;
}

ProductTiles product_tiles(const MatmulShape& s, const TileGrid& g) {
  const int64_t t = g.tile;
  ProductTiles p;
  p.tiles = s.batch * ((s.m + t - 1) / t) * ((s.n + t - 1) / t);
  p.k_steps = (s.k + g.tile_k - 1) / g.tile_k;
  double tile_work = static_cast<double>(t) * static_cast<double>(t) * static_cast<double>(p.k_steps * g.tile_k);
  if (g.k_overhead > 0) tile_work *= (static_cast<double>(s.k) + g.k_overhead) / static_cast<double>(s.k);
  p.flops = static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  p.padded = static_cast<double>(p.tiles) * tile_work;
  return p;
}

double wave_fill(int64_t tiles, int64_t max_k_steps, int64_t units) {
  if (tiles < units) tiles *= std::max<int64_t>(1, std::min(units / tiles, max_k_steps));
  const int64_t waves = (tiles + units - 1) / units;
  return static_cast<double>(tiles) / static_cast<double>(waves * units);
}

}  // namespace titan::devices
