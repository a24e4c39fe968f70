// Tile / wave model shared by the GEMM and grouped-GEMM efficiencies (devices/matmul_tiles.h).
#include "devices/matmul_tiles.h"

#include <gtest/gtest.h>

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(MatmulTiles, PaddedWorkCountsPartialTilesFull) {
  ChipSpec chip;
  chip.matmul_tile = 128;
  chip.matmul_tile_k = 64;
  chip.matmul_units = 132;
  const TileGrid grid = tile_grid(chip);
  // 2 x 100 x 300 x 100: ceil(100/128) ceil(300/128) = 3 tiles per product, K in 2 steps of 64.
  const ProductTiles p = product_tiles({2, 100, 300, 100}, grid);
  EXPECT_EQ(p.tiles, 6);
  EXPECT_EQ(p.k_steps, 2);
  EXPECT_DOUBLE_EQ(p.flops, 2.0 * 100 * 300 * 100);
  EXPECT_DOUBLE_EQ(p.padded, 6.0 * 128 * 128 * 128);
  // The CPU's K-loop overhead k0 makes each tile's work (k + k0) / k larger.
  chip.matmul_k_overhead = 16;
  EXPECT_DOUBLE_EQ(product_tiles({2, 100, 300, 100}, tile_grid(chip)).padded, 6.0 * 128 * 128 * 128 * 116.0 / 100.0);
  // tile_k 0 steps K by the tile.
  chip.matmul_tile_k = 0;
  EXPECT_EQ(product_tiles({1, 128, 128, 129}, tile_grid(chip)).k_steps, 2);
}

TEST(MatmulTiles, WaveFillSplitsKOnlyWhenTilesAreTooFew) {
  // 4096 tiles over 132 engines: 32 waves, the last one 4/132 full.
  EXPECT_DOUBLE_EQ(wave_fill(4096, 128, 132), 4096.0 / (32 * 132));
  // 32 tiles split K 4 ways (132 / 32) -> 128 of 132 engines busy ...
  EXPECT_DOUBLE_EQ(wave_fill(32, 64, 132), 128.0 / 132.0);
  // ... no deeper than K allows: 2 steps of K -> 64 of 132.
  EXPECT_DOUBLE_EQ(wave_fill(32, 2, 132), 64.0 / 132.0);
  EXPECT_DOUBLE_EQ(wave_fill(1, 0, 4), 0.25);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
