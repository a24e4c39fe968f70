// Op descriptors (filled by the trainer's trace recorder) and the roofline compute model that
// turns runs of ops into device kernels per execution mode; used by step_simulator.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "devices/chip_catalog.h"
#include "devices/interned_name.h"

namespace titan::devices {

enum class OpKind {
  kMatmul,       // mm / bmm / addmm / baddbmm leaves (cost leaves once, not aten::matmul/linear)
  kAttention,    // scaled-dot-product attention, costed as one flash / splash kernel
  kElementwise,  // pointwise math (add, mul, silu, rsqrt, casts, ...): fusable
  kReduction,    // sum / mean / max over a dim (norms, softmax statistics): fusable
  kOther,        // data movement that breaks fusion (copy, cat, index, embedding, scatter)
  kView,         // metadata only (view, reshape of contiguous, transpose, expand): no bytes
  kFused,        // one of the trainer's fused CPU kernels (norm, SwiGLU, RoPE, cross entropy;
                 // devices/fused_ops.h): already one kernel, memory bound, fuses no further
};
const char* op_kind_name(OpKind kind);

enum class ExecutionMode {
  kEager,         // one kernel per aten op; every result written to HBM; per-op dispatch
  kDeferAndFuse,  // ops deferred and elementwise chains fused; dispatch amortized
  kCompiled,      // whole step compiled: fusion + epilogue fusion, no per-op host dispatch
};
const char* execution_name(ExecutionMode mode);       // "eager" | "defer_and_fuse" | "compiled"
ExecutionMode parse_execution(const std::string& s);  // config error lists the valid names

struct MatmulShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;  // C[batch, m, n] = A[batch, m, k] B[batch, k, n]
};

struct AttentionShape {
  int64_t batch = 1, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  bool causal = true;
  bool backward = false;  // the backward kernel (dQ, dK, dV), ~2.5x the forward FLOPs
};

// A tensor an op reads or writes, by identity (the recorder uses its storage), with its bytes.
struct TensorUse {
  int64_t id = 0;
  int64_t bytes = 0;
  // Data flow, filled by Trace::compute (OpDesc::index numbers the ops): a read's is the op
  // that wrote the tensor (-1: written before the step or by no recorded op); a write's, the
  // last op that reads it before it is overwritten (-1: none in the step). Fusion uses it to
  // decide which tensors must reach HBM.
  int64_t flow = -1;
};

// One recorded op. The recorder fills kind, shapes, bytes and (when it can) the tensors it
// reads and writes; helpers below fill the rest.
struct OpDesc {
  InternedName name;  // aten name, for reports
  OpKind kind = OpKind::kOther;
  double flops = 0;           // as recorded; matmul/attention recompute it from the shape
  int64_t bytes_read = 0;     // HBM bytes of all inputs
  int64_t bytes_written = 0;  // HBM bytes of all outputs
  MatmulShape mm;             // kMatmul
  // kMatmul as a grouped GEMM (mixture-of-experts experts: torch._grouped_mm, cutlass
  // GroupedGEMM, megablox): these products in one kernel, whose tiles share the waves and pay
  // one launch (ComputeModel::grouped_matmul_efficiency); mm is then unused.
  std::vector<MatmulShape> groups;
  AttentionShape attn;        // kAttention
  int64_t dtype_bytes = 2;    // element size of the compute dtype
  // Recorded outside the model's transformer blocks (embedding, final norm, output and loss,
  // FSDP's casts, gradient clipping, the optimizer step; their backward too). A compiler that
  // covers only the blocks (ChipSpec::compiled_covers_step false) runs these eagerly.
  bool outside_blocks = false;
  // Its sizes were rewritten for another dp_shard degree (trainer/simulate/shard_resize.h):
  // of the ops its trace's ops_id names, its sizes differ between traces of that name.
  bool resized = false;
  std::vector<TensorUse> reads, writes;  // with their data flow (TensorUse::flow)
  int64_t index = -1;  // the op's position among the step's ops, filled by Trace::compute
};

OpDesc matmul_op(InternedName name, MatmulShape s, int64_t dtype_bytes = 2);
// One grouped GEMM over `groups` (empty products dropped): FLOPs and HBM bytes are the
// products' sums, so each group's B operand (an expert's weights) is read once.
OpDesc grouped_matmul_op(InternedName name, std::vector<MatmulShape> groups, int64_t dtype_bytes = 2);
OpDesc attention_op(const AttentionShape& s, int64_t dtype_bytes = 2);
OpDesc pointwise_op(InternedName name, OpKind kind, int64_t bytes_read, int64_t bytes_written,
                    double flops = 0);

// What a kernel's time rests on, for the report of the parts of a step the simulator is least
// sure of (StepReport::uncertain). Only a measurement makes a basis sure: the cpu device's
// calibration, and the sustained clock of the H100 family (an 8192^3 GEMM timed on an H200).
enum class CostBasis {
  kMatmulMeasured,  // large compute-bound matmul on a chip whose matmul rate was measured
  kMatmulDatasheet, // large compute-bound matmul at the datasheet clock (no measured rate)
  kMatmulBorrowed,  // large compute-bound matmul at another chip's sustained clock ratio
  kMatmulFitted,    // large compute-bound matmul at a clock share fitted on this chip's published runs
  kMatmulShape,     // matmul the tile / wave model or the memory roofline decides (thin shapes)
  kAttention,       // flash attention: its efficiency relative to a GEMM was not measured here
  kMemory,          // HBM-bound: bytes from the recorded ops and the fusion model, streaming
                    // efficiency assumed
  kVector,          // math on the vector units at an assumed share of the matrix peak
  kKernelMeasured,  // a fused kernel at the rate this device's calibration timed (cpu)
  kNone,            // no time (views)
};
constexpr int kCostBases = 10;
static_assert(static_cast<int>(CostBasis::kNone) + 1 == kCostBases, "kCostBases counts CostBasis");
const char* cost_basis_name(CostBasis basis);  // what it rests on, for the report

// What a run of ops becomes on the device.
struct Kernel {
  InternedName category;  // op_kind_name of its main op
  double exec_s = 0;     // roofline time of the math / memory traffic (of the two below)
  double compute_s = 0;  // the math alone at the matrix / vector rate
  double memory_s = 0;   // the HBM traffic alone
  double launch_s = 0;   // device-side per-kernel overhead (program / kernel launch gap)
  double host_s = 0;     // host dispatch of the ops it holds
  double flops = 0;      // FLOPs it executes (attention: causal-skipped FLOPs not counted)
  int64_t bytes = 0;     // HBM bytes it moves after fusion
  int64_t ops = 0;       // recorded ops folded into it
  CostBasis basis = CostBasis::kNone;
  // For the report by op: the name of its op (a fused chain: its first non-view op's) and
  // whether it fused several. The op's interned name (OpDesc::name): one address per name.
  const std::string* lead = nullptr;
  bool chain = false;
};

// The tensor uses a fused chain moves through HBM, by their place in the run of ops it was
// lowered from, in the order its byte count adds them. Which uses cross the chain's boundary
// follows from the data flow, which shard resizing leaves: a chain whose sizes were rewritten
// is costed again from these (ComputeModel::recost_chain) without walking its data flow.
struct ChainTraffic {
  struct At {
    uint32_t op = 0, slot = 0;  // ops[op]'s reads (or writes) [slot]
  };
  std::vector<At> reads, writes;
  bool chain = false;  // lower_at made a fused chain (else a kernel of one op, and no traffic)
  bool flow = false;   // false: some op has no data flow (the byte count's other rule applies)
  double bytes(const std::vector<const OpDesc*>& ops) const;
};

// Per-op and per-kernel overheads of an execution mode on a chip (its [dispatch] figures; the
// cpu device's are measured, see compute_cost.cpp).
struct ExecutionOverheads {
  double host_per_op_s = 0;       // host work per recorded op (dispatch / tracing)
  double host_per_view_s = 0;     // the same for a metadata-only op (= host_per_op_s except
                                  // on the cpu device, which measures both)
  double launch_per_kernel_s = 0; // device gap per kernel (launch, ramp, tail)
  bool async = true;              // the host runs ahead of the device (accelerators)
  bool fuse_elementwise = false;
  bool fuse_epilogue = false;     // elementwise chain after a matmul folds into it
  // Ops outside the model's blocks (OpDesc::outside_blocks) run eagerly at these costs, unfused
  // (compiled mode where the compiler covers only the blocks: torch.compile per block).
  bool outside_blocks_eager = false;
  double outside_host_per_op_s = 0, outside_launch_per_kernel_s = 0;
};
ExecutionOverheads execution_overheads(const ChipSpec& chip, ExecutionMode mode);
// A compiler schedules the whole step, not only the blocks (XLA on TPU and Trainium: compiled
// mode on an accelerator whose compiler covers the step): it fuses the loss into the logits'
// consumers (trainer/simulate/trace_recorder.h) and places each FSDP gather and
// reduce-scatter around the weight's own uses (devices/trace_memory.h, per_use).
bool compiles_whole_step(const ChipSpec& chip, ExecutionMode mode);

class ComputeModel {
 public:
  ComputeModel(const ChipSpec& chip, ExecutionMode mode);

  // Fraction of the datasheet peak a matmul of this shape reaches (sustained clock x tile
  // padding x wave quantization against the chip's matrix units).
  double matmul_efficiency(const MatmulShape& s) const;
  // The same for one grouped GEMM: each tile keeps its product's padding, and the tiles of all
  // products fill the engines' waves together (devices/grouped_matmul_cost.cpp). One product:
  // matmul_efficiency of it.
  double grouped_matmul_efficiency(const std::vector<MatmulShape>& groups) const;
  // max(flops / (peak * efficiency), bytes / (hbm_bw * hbm_efficiency)) for one op, unfused.
  double roofline_s(const OpDesc& op) const;
  // FLOPs a flash kernel executes for this shape (causal blocks above the diagonal skipped).
  double attention_flops(const AttentionShape& s) const;

  // Lowers ops that run back to back (no collective in between) into kernels.
  std::vector<Kernel> lower(const std::vector<OpDesc>& ops) const;
  // The same for ops held elsewhere (a replay's trace), into *out (cleared first): a replay
  // lowers thousands of runs, and neither copies their ops nor allocates kernels anew.
  void lower(const std::vector<const OpDesc*>& ops, std::vector<Kernel>* out) const;
  // The one kernel of that lowering that starts at ops[i], into *kernel; returns where the
  // next starts. Which ops a kernel holds follows from the ops' kinds alone (never their
  // sizes); its figures read only its ops and, for a chain fused into a matmul's epilogue,
  // ops[i - 1].
  // traffic (a fused chain only): where its bytes came from, for recost_chain.
  size_t lower_at(const std::vector<const OpDesc*>& ops, size_t i, Kernel* kernel,
                  ChainTraffic* traffic = nullptr) const;
  // The fused chain lower_at made of ops[i, j) with this traffic, costed again from the ops'
  // sizes now (the same ops, kinds and data flow): its FLOPs, bytes, times and basis.
  void recost_chain(const std::vector<const OpDesc*>& ops, size_t i, size_t j, const ChainTraffic& traffic,
                    Kernel* kernel) const;
  // The fraction of its speed a kernel keeps while a collective runs beside it.
  double rate_under_comm(const Kernel& k) const;

  const ExecutionOverheads& overheads() const { return overheads_; }
  const ChipSpec& chip() const { return chip_; }

 private:
  struct KernelTime {
    double compute_s = 0, memory_s = 0;
  };
  KernelTime kernel_time(const OpDesc& op) const;
  CostBasis basis_of(const OpDesc& op, const KernelTime& t) const;
  double fused_bytes(const std::vector<const OpDesc*>& ops, size_t i, size_t j, const OpDesc* mm,
                     ChainTraffic* traffic = nullptr) const;
  // Epilogue fusion (compiled): the matmul right before a chain starting at ops[i], whose
  // accumulators the chain reads; nullptr when none or the mode does not fuse epilogues.
  const OpDesc* epilogue_of(const std::vector<const OpDesc*>& ops, size_t i) const;
  // A chain's figures from its FLOPs and bytes (real_ops: its ops other than views).
  void finish_chain(Kernel* k, double flops, double bytes, int64_t real_ops, bool epilogue) const;
  double memory_s(double bytes) const;
  double combine(double compute_s, double memory_s) const;
  double compute_s(double flops, double efficiency) const;

  ChipSpec chip_;
  ExecutionMode mode_;
  ExecutionOverheads overheads_;
};

}  // namespace titan::devices
