// Tile / wave model of matrix products on a chip's matrix units: the padded work of one
// product and how its output tiles fill the engines' waves. Shared by
// ComputeModel::matmul_efficiency (one GEMM, devices/compute_cost.cpp) and
// ComputeModel::grouped_matmul_efficiency (many products in one kernel, grouped_matmul_cost.cpp).
#pragma once

#include <cstdint>

#include "devices/chip_catalog.h"
#include "devices/compute_cost.h"

namespace titan::devices {

// The matrix units' tiling: T x T output tiles stepping K by T_k, spread over U engines.
struct TileGrid {
  int64_t tile = 1;         // T (TPU MXU 128 or 256, Trainium tensor engine 128, GPU CTA tile 128)
  int64_t tile_k = 1;       // T_k (T on a systolic array, 64 on GPUs)
  int64_t units = 1;        // U (SMs / MXUs / NeuronCores)
  double k_overhead = 0;    // k0: CPU BLAS per-tile K-loop overhead in K steps (0 elsewhere)
};
TileGrid tile_grid(const ChipSpec& chip);

// One product C[batch, m, n] = A[batch, m, k] B[batch, k, n] on that grid. Dimensions must be
// positive.
struct ProductTiles {
  int64_t tiles = 0;    // batch x ceil(m / T) x ceil(n / T) output tiles
  int64_t k_steps = 0;  // ceil(k / T_k): the deepest split-K the product allows
  double flops = 0;     // multiply-adds asked for: batch m n k
  // multiply-adds the engines do, a partial tile costing a full one: tiles x T x T x k_steps
  // T_k, times (k + k0) / k for the CPU's per-tile load / store / packing (ChipSpec::
  // matmul_k_overhead, from the calibration's measured rate at K = 16).
  double padded = 0;
};
ProductTiles product_tiles(const MatmulShape& s, const TileGrid& grid);

// Share of the engines' wave slots that tiles fill: tiles / (ceil(tiles / U) U), the last wave
// running partly empty. Fewer tiles than engines: libraries split K (split-K / stream-K), up
// to one T_k-deep slice per engine and no deeper than max_k_steps allows. tiles > 0.
double wave_fill(int64_t tiles, int64_t max_k_steps, int64_t units);

}  // namespace titan::devices
