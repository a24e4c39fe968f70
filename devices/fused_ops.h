// Op descriptors of the trainer's fused CPU kernels (trainer/model/kernels): what one call of
// each kernel reads, writes and computes, forward and backward. One place for both users:
// the trace recorder (trainer/simulate/trace_recorder.cpp), which turns a fused kernel's scope
// into these ops, and the cpu calibration (bench/calibrate_cpu.cpp), which times the kernels
// and divides these same bytes / FLOPs by the time, so that a measured rate and the op it
// prices always count the same work.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/fused_kernel_names.h"
#include "devices/compute_cost.h"

namespace titan::devices {

// Op names (OpDesc::name) of the fused kernels; backward ops add "_backward", the linear's
// "_input_grad" / "_weight_grad". The cpu device's measured rates are keyed by these names,
// which come from the one table of fused kernels (common/fused_kernel_names.h).
constexpr const char* kFusedLinearOp = fused_kernel_name(FusedKernel::kLinear).op;
constexpr const char* kFusedRmsNormOp = fused_kernel_name(FusedKernel::kRmsNorm).op;
constexpr const char* kFusedSwigluOp = fused_kernel_name(FusedKernel::kSwiglu).op;
constexpr const char* kFusedRopeOp = fused_kernel_name(FusedKernel::kRope).op;
constexpr const char* kFusedCrossEntropyOp = fused_kernel_name(FusedKernel::kCrossEntropy).op;
constexpr const char* kFusedAttentionOp = fused_kernel_name(FusedKernel::kAttention).op;
constexpr const char* kFusedAdamwOp = fused_kernel_name(FusedKernel::kAdamw).op;             // no backward
constexpr const char* kFusedSumSquaresOp = fused_kernel_name(FusedKernel::kSumSquares).op;  // no backward

// Whether `name` is one of the op names above (with its backward suffixes; attention's also
// as measured at one shape, with_attention_shape), and the list, for errors.
bool is_fused_kernel_op(const std::string& name);
std::string fused_kernel_op_names();

// The attention kernel's speed per FLOP depends on its shape: on head_dim (the softmax work
// per score is the same whatever the head_dim, its FLOPs grow with it) and on the sequence
// (per-row work, and the diagonal blocks' share of a causal mask), so the calibration measures
// it on a grid of both: "titan::fused_attention@hd=64,s=256".
std::string with_attention_shape(const std::string& name, int64_t head_dim, int64_t seq);

// The measured rate (ChipSpec::kernel_rates) that prices `op`, 0 when none does: its name's
// rate; for attention without one, the rates measured on the (head_dim, sequence) grid,
// interpolated bilinearly in log(head_dim) and log(sequence) (clamped to the grid's edges).
double measured_kernel_rate(const std::map<std::string, double>& rates, const OpDesc& op);

// The memory-bound kernels (OpKind::kFused). Element counts are of the kernel's main operand;
// dtype_bytes is its element size.
// RMSNorm over rows of n: y = w * x * rstd (rstd saved per row); backward dx and dw.
OpDesc rms_norm_op(int64_t rows, int64_t n, int64_t dtype_bytes, bool backward);
// silu(a) * b on `elements` elements each; backward da, db.
OpDesc swiglu_op(int64_t elements, int64_t dtype_bytes, bool backward);
// Rotary embedding of x (`elements`) with float cos / sin tables of `table_elements` each.
OpDesc rope_op(int64_t elements, int64_t table_elements, int64_t dtype_bytes, bool backward);
// Cross entropy fused with the softmax over rows of `vocab` logits (int64 labels).
OpDesc cross_entropy_op(int64_t rows, int64_t vocab, int64_t dtype_bytes, bool backward);

// The optimizer's passes over its flat buffers (trainer/components/flat_kernels.h) of
// `elements` parameters: the AdamW update (reads parameter, gradient and both moments, writes
// parameter and moments) and the gradient norm's sum of squares.
OpDesc adamw_op(int64_t elements, int64_t dtype_bytes);
OpDesc sum_squares_op(int64_t elements, int64_t dtype_bytes);

// The linear layer y = x w^T, x [rows, in], w [out, in]: one matmul forward; backward the
// products it needs (dx = dy w, dw = dy^T x).
OpDesc linear_op(int64_t rows, int64_t in, int64_t out, int64_t dtype_bytes);
std::vector<OpDesc> linear_backward_ops(int64_t rows, int64_t in, int64_t out, int64_t dtype_bytes,
                                        bool input_grad, bool weight_grad);

// The fused causal attention kernel (no S x S scores in memory): the flash descriptor
// (attention_op) under kFusedAttentionOp's name.
OpDesc fused_attention_op(AttentionShape s, int64_t dtype_bytes);

}  // namespace titan::devices
