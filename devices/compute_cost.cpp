// Kernel model: matmul time by shape against the chip's matrix units, flash attention and the
// roofline for everything else (fusion per execution mode: execution_modes.cpp). The named
// constants below describe kernels (software), not chips; chip figures come from the catalog.
#include "devices/compute_cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/error.h"
#include "devices/fused_ops.h"
#include "devices/matmul_tiles.h"

namespace titan::devices {
namespace {

// Flash attention relative to a GEMM of the same shape: the online softmax (exp on the
// vector / special-function units, rescaling) stalls the matrix units. FlashAttention-2/3
// papers: forward reaches ~70-75% of peak where GEMMs reach ~80%; the backward (5 GEMMs,
// atomics / extra passes for dQ) ~55-60%.
constexpr double kFlashForwardFactor = 0.90;
constexpr double kFlashBackwardFactor = 0.75;
// Backward of flash attention recomputes S = QK^T and P, then dV = P^T dO, dP = dO V^T,
// dS -> dQ, dK: 5 matmuls against the forward's 2.
constexpr double kFlashBackwardFlopRatio = 2.5;
// Element operations per attention score off the matrix units: forward, exp (scale and mask
// folded into it) plus the running max and row sum; backward, exp again (P is recomputed)
// plus dS = P * (dP - D). They run on the vector / special-function units beside the matrix
// units, so a kernel takes the longer of the two; only chips whose non-matrix rate is far
// below the usual ~1/16 of the matrix peak (Trainium's vector and scalar engines) reach it.
constexpr double kFlashForwardScoreOps = 3;
constexpr double kFlashBackwardScoreOps = 3;

// A matmul whose tile and wave losses exceed this share runs where the shape model alone sets
// its time: the one measured point of any chip is a large square GEMM, whose shape losses are
// a few percent (8192^3 on 132 SMs: 3%).
constexpr double kMeasuredShapeFactor = 0.8;

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kMatmul: return "matmul";
    case OpKind::kAttention: return "attention";
    case OpKind::kElementwise: return "elementwise";
    case OpKind::kReduction: return "reduction";
    case OpKind::kOther: return "other";
    case OpKind::kView: return "view";
    case OpKind::kFused: return "fused";
  }
  return "?";
}

const char* cost_basis_name(CostBasis b) {
  switch (b) {
    case CostBasis::kMatmulMeasured: return "matmul at a measured rate";
    case CostBasis::kMatmulDatasheet: return "matmul at the datasheet clock (no measured rate for this chip)";
    case CostBasis::kMatmulBorrowed: return "matmul at the sustained clock share of another chip of its vendor (none for this one)";
    case CostBasis::kMatmulFitted: return "matmul at a clock share fitted on this chip's published runs (launch/calibrate-chips)";
    case CostBasis::kMatmulShape: return "thin matmul shapes (tile/wave model or memory roofline, not measured)";
    case CostBasis::kAttention: return "flash attention (efficiency vs a GEMM from GPU papers, not measured here)";
    case CostBasis::kMemory: return "memory-bound kernels (bytes from recorded ops and the fusion model, streaming efficiency assumed)";
    case CostBasis::kVector: return "vector-unit math (assumed share of the matrix peak)";
    case CostBasis::kKernelMeasured: return "fused kernel at the rate the calibration measured on this host";
    case CostBasis::kNone: return "no time";
  }
  return "?";
}

OpDesc matmul_op(InternedName name, MatmulShape s, int64_t dtype_bytes) {
  OpDesc op;
  op.name = name;
  op.kind = OpKind::kMatmul;
  op.mm = s;
  op.dtype_bytes = dtype_bytes;
  op.flops = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.m) *
             static_cast<double>(s.n) * static_cast<double>(s.k);
  op.bytes_read = s.batch * (s.m * s.k + s.k * s.n) * dtype_bytes;
  op.bytes_written = s.batch * s.m * s.n * dtype_bytes;
  return op;
}

OpDesc attention_op(const AttentionShape& s, int64_t dtype_bytes) {
  OpDesc op;
  static const InternedName kForward("flash_attention"), kBackward("flash_attention_backward");
  op.name = s.backward ? kBackward : kForward;
  op.kind = OpKind::kAttention;
  op.attn = s;
  op.dtype_bytes = dtype_bytes;
  const int64_t q = s.batch * s.heads * s.q_len * s.head_dim;      // Q, O, dQ, dO elements
  const int64_t kv = s.batch * s.kv_heads * s.kv_len * s.head_dim;  // K, V, dK, dV elements
  const int64_t lse = s.batch * s.heads * s.q_len * 4;              // fp32 log-sum-exp
  // No S x S scores reach HBM: forward reads Q K V, writes O (+ LSE); backward reads
  // Q K V O dO LSE and writes dQ dK dV.
  if (!s.backward) {
    op.bytes_read = (q + 2 * kv) * dtype_bytes;
    op.bytes_written = q * dtype_bytes + lse;
  } else {
    op.bytes_read = (3 * q + 2 * kv) * dtype_bytes + lse;
    op.bytes_written = (q + 2 * kv) * dtype_bytes;
  }
  // Full (non-causal) math FLOPs, the MFU convention; the model skips masked blocks.
  op.flops = 4.0 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.q_len) *
             static_cast<double>(s.kv_len) * static_cast<double>(s.head_dim) *
             (s.backward ? kFlashBackwardFlopRatio : 1.0);
  return op;
}

OpDesc pointwise_op(InternedName name, OpKind kind, int64_t bytes_read,
                    int64_t bytes_written, double flops) {
  OpDesc op;
  op.name = name;
  op.kind = kind;
  op.bytes_read = bytes_read;
  op.bytes_written = bytes_written;
  op.flops = flops;
  return op;
}

ComputeModel::ComputeModel(const ChipSpec& chip, ExecutionMode mode)
    : chip_(chip), mode_(mode), overheads_(execution_overheads(chip, mode)) {
  TITAN_CHECK(chip.peak_bf16_flops > 0 && chip.hbm_bytes_per_s > 0, "chip ", chip.name,
              " has no peak or memory bandwidth");
}

// Fraction of the datasheet peak a matmul of this shape reaches:
//   efficiency = clock x flops / padded work x wave fill   (devices/matmul_tiles.h)
//  clock = sustained / peak clock (ChipSpec::clock_ratio): power-limited parts cannot hold
//  the clock their peak is quoted at under dense matmul load.
//  flops / padded work = pad(m) pad(n) pad(k) with pad(d) = d / (ceil(d / T) T): the matrix
//  unit works on T x T output tiles stepping K by T_k, and a partial tile costs a full one. On
//  256-wide MXUs a head_dim of 128 fills half the array, which is real. On the CPU it also
//  carries each tile's K-loop overhead, k / (k + k0).
//  wave fill = tiles / (ceil(tiles / U) U): output tiles are spread over U engines (SMs / MXUs /
//  NeuronCores); the last wave runs partly empty. Fewer tiles than engines: K is split.
double ComputeModel::matmul_efficiency(const MatmulShape& s) const {
  // A zero-sized dimension is no work: the clock share, as for an empty grouped GEMM.
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return chip_.clock_ratio();
  const TileGrid grid = tile_grid(chip_);
  const ProductTiles p = product_tiles({std::max<int64_t>(1, s.batch), s.m, s.n, s.k}, grid);
  return chip_.clock_ratio() * p.flops / p.padded * wave_fill(p.tiles, p.k_steps, grid.units);
}

double ComputeModel::attention_flops(const AttentionShape& s) const {
  double full = 4.0 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.q_len) *
                static_cast<double>(s.kv_len) * static_cast<double>(s.head_dim);
  if (s.causal) {
    // Blocks of T x T: with nb blocks per side the kernel computes nb(nb+1)/2 of nb^2.
    double nb = std::ceil(static_cast<double>(std::max(s.q_len, s.kv_len)) /
                          static_cast<double>(std::max<int64_t>(1, chip_.matmul_tile)));
    full *= (nb + 1) / (2 * nb);
  }
  return full * (s.backward ? kFlashBackwardFlopRatio : 1.0);
}

// An op whose operands fit in the host's last-level cache (cpu device: measured size and
// copy bandwidth of a cache-resident buffer) streams them from there: activations of a small
// model are written by one op and read by the next without reaching DRAM.
double ComputeModel::memory_s(double bytes) const {
  if (chip_.cache_bytes > 0 && chip_.cache_bytes_per_s > 0 && bytes <= chip_.cache_bytes)
    return bytes / chip_.cache_bytes_per_s;
  return bytes / (chip_.hbm_bytes_per_s * chip_.hbm_efficiency);
}

// Accelerators overlap math with memory traffic (the roofline's max). One CPU thread issues
// both from the same instruction stream and waits on its loads: their times add.
double ComputeModel::combine(double compute_s, double memory_s) const {
  return chip_.serial_kernels ? compute_s + memory_s : std::max(compute_s, memory_s);
}

double ComputeModel::compute_s(double flops, double efficiency) const {
  if (flops <= 0) return 0;
  return flops / (chip_.peak_bf16_flops * std::max(efficiency, 1e-6));
}

double ComputeModel::roofline_s(const OpDesc& op) const {
  const KernelTime k = kernel_time(op);
  return combine(k.compute_s, k.memory_s);
}

ComputeModel::KernelTime ComputeModel::kernel_time(const OpDesc& op) const {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  // A fused kernel this device's calibration timed (ChipSpec::kernel_rates): its measured rate,
  // which already holds its math and its cache traffic; operands beyond the cache still wait
  // on DRAM.
  if (const double rate = chip_.kernel_rates.empty() ? 0 : measured_kernel_rate(chip_.kernel_rates, op); rate > 0) {
    if (op.kind == OpKind::kAttention) return {op.flops / rate, 0};
    if (op.kind == OpKind::kFused) return {0, std::max(bytes / rate, memory_s(bytes))};
  }
  switch (op.kind) {
    case OpKind::kMatmul: {
      if (!op.groups.empty()) return {compute_s(op.flops, grouped_matmul_efficiency(op.groups)), memory_s(bytes)};
      bool shaped = op.mm.m > 0 && op.mm.n > 0 && op.mm.k > 0;
      double flops = shaped ? 2.0 * static_cast<double>(op.mm.batch) * op.mm.m * op.mm.n * op.mm.k
                            : op.flops;
      double eff = shaped ? matmul_efficiency(op.mm) : chip_.clock_ratio();
      return {compute_s(flops, eff), memory_s(bytes)};
    }
    case OpKind::kAttention: {
      const AttentionShape& a = op.attn;
      // The kernel's two GEMM shapes per (batch, head): S = Q K^T (m=q, n=kv, k=d) and
      // O = P V (m=q, n=d, k=kv); equal FLOPs, so the harmonic mean of their efficiencies.
      double e1 = matmul_efficiency({a.batch * a.heads, a.q_len, a.kv_len, a.head_dim});
      double e2 = matmul_efficiency({a.batch * a.heads, a.q_len, a.head_dim, a.kv_len});
      double eff = 2.0 / (1.0 / e1 + 1.0 / e2) * kFlashForwardFactor;
      // The framework's kernel may cap below that (FA2 on Hopper/Blackwell, see ChipSpec).
      if (chip_.attention_peak_fraction > 0)
        eff = std::min(eff, chip_.attention_peak_fraction * chip_.clock_ratio());
      if (a.backward) eff *= kFlashBackwardFactor / kFlashForwardFactor;
      const double flops = attention_flops(a);
      // Scores computed: the GEMM FLOPs over the 4 * head_dim each score takes per pass.
      const double scores = flops / (4.0 * static_cast<double>(std::max<int64_t>(1, a.head_dim)) *
                                     (a.backward ? kFlashBackwardFlopRatio : 1.0));
      const double engine_s =
          compute_s(scores * (a.backward ? kFlashBackwardScoreOps : kFlashForwardScoreOps), chip_.vector_peak_fraction);
      return {std::max(compute_s(flops, eff), engine_s), memory_s(bytes)};
    }
    case OpKind::kView:
      return {0, 0};
    default:
      // Pointwise / reductions / copies: memory bound on every accelerator (a few FLOPs per
      // byte), but keep the compute side for ops that record heavy math.
      return {compute_s(op.flops, chip_.vector_peak_fraction), memory_s(bytes)};
  }
}

// What a lone op's time rests on. The matmul rate counts as measured only where a measurement
// sets it: the cpu device's calibration, or a sustained clock (chips without one are assumed
// to hold their datasheet clock).
CostBasis ComputeModel::basis_of(const OpDesc& op, const KernelTime& t) const {
  // A timed fused kernel rests on its measurement, unless its operands spill to DRAM and the
  // streaming estimate sets its time instead.
  const bool timed = op.kind == OpKind::kAttention || op.kind == OpKind::kFused;
  if (const double rate = timed && !chip_.kernel_rates.empty() ? measured_kernel_rate(chip_.kernel_rates, op) : 0;
      rate > 0) {
    const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
    const bool spills = op.kind == OpKind::kFused && memory_s(bytes) > bytes / rate;
    return spills ? CostBasis::kMemory : CostBasis::kKernelMeasured;
  }
  switch (op.kind) {
    case OpKind::kView: return CostBasis::kNone;
    case OpKind::kAttention: return CostBasis::kAttention;
    case OpKind::kMatmul: {
      if (t.memory_s > t.compute_s) return CostBasis::kMatmulShape;
      const bool shaped = op.mm.m > 0 && op.mm.n > 0 && op.mm.k > 0;
      const double eff = !op.groups.empty() ? grouped_matmul_efficiency(op.groups)
                         : shaped            ? matmul_efficiency(op.mm)
                                             : chip_.clock_ratio();
      if (eff < kMeasuredShapeFactor * chip_.clock_ratio())
        return CostBasis::kMatmulShape;
      const bool measured = chip_.matmul_rate_measured || chip_.sustained_clock_hz > 0;
      if (measured) return CostBasis::kMatmulMeasured;
      if (chip_.fitted_clock_share > 0) return CostBasis::kMatmulFitted;
      return chip_.borrowed_clock_ratio > 0 ? CostBasis::kMatmulBorrowed : CostBasis::kMatmulDatasheet;
    }
    default:
      return t.memory_s >= t.compute_s ? CostBasis::kMemory : CostBasis::kVector;
  }
}

// A running collective takes comm_units of the matrix units (GPU SMs) and its traffic's
// share of HBM bandwidth; the kernel's compute and memory sides stretch by what is left.
double ComputeModel::rate_under_comm(const Kernel& k) const {
  const double units = static_cast<double>(std::max<int64_t>(1, chip_.matmul_units));
  const double units_left = 1.0 - std::min(0.5, static_cast<double>(chip_.comm_units) / units);
  const double comm_bytes_per_s =
      chip_.comm_memory_traffic * chip_.link_bidi_per_chip() * chip_.link_efficiency;
  const double hbm_left =
      1.0 - std::min(0.5, comm_bytes_per_s / (chip_.hbm_bytes_per_s * chip_.hbm_efficiency));
  const double alone = k.launch_s + combine(k.compute_s, k.memory_s);
  const double shared =
      k.launch_s + combine(k.compute_s / units_left, k.memory_s / hbm_left);
  return alone > 0 && shared > alone ? alone / shared : 1.0;
}

}  // namespace titan::devices
