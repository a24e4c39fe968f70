// Which fused CPU kernels the model runs (trainer/model/kernels/*_kernel.h), and the test
// of whether a tensor can take them. Read by the model's modules and the loss; the trainer
// sets it from [training] fused_kernels. Off, or on tensors the kernels do not take (the
// meta device of the simulator, other devices, dtypes other than float and double), the
// model runs the composite ATen ops instead; on the meta device, where a real CPU run would
// take a kernel and the recording keeps the kernels, that kernel's stand-in (meta_kernel.h).
#pragma once

#include <torch/torch.h>

#include "common/fused_kernel_names.h"

namespace titan {

struct FusedKernels {
  bool rms_norm = true;
  bool swiglu = true;
  bool rope = true;
  bool attention = true;
  bool cross_entropy = true;
  bool linear = true;  // linear_kernel.h: one autograd node, GEMM threads chosen per shape
  static FusedKernels all(bool on) { return {on, on, on, on, on, on}; }
};

// A strided CPU tensor of float or double.
inline bool fusable(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

// Profiling scopes (RecordFunction scopes) around a fused kernel's place in the model when it
// runs on the meta device in a recording that keeps the kernels (meta_kernel.h): the kernels
// cannot run there, so the model runs a stand-in inside the scope and the recorder
// (trainer/simulate/trace_recorder.h) keeps the scope as the one kernel a real CPU run takes.
// Inputs: linear (x, weight), rms_norm (x, weight), swiglu (gate, up), rope (x, cos, sin),
// cross_entropy (logits, labels), attention (q, k, v), as the kernels take them. The names
// are the scope column of common/fused_kernel_names.h.
constexpr const char* kFusedLinearScope = fused_kernel_name(FusedKernel::kLinear).scope;
constexpr const char* kFusedRmsNormScope = fused_kernel_name(FusedKernel::kRmsNorm).scope;
constexpr const char* kFusedSwigluScope = fused_kernel_name(FusedKernel::kSwiglu).scope;
constexpr const char* kFusedRopeScope = fused_kernel_name(FusedKernel::kRope).scope;
constexpr const char* kFusedCrossEntropyScope = fused_kernel_name(FusedKernel::kCrossEntropy).scope;
constexpr const char* kFusedAttentionScope = fused_kernel_name(FusedKernel::kAttention).scope;
// Inside a stand-in's backward (meta_kernel.h): the gradients it returns as the scope's
// outputs, so that the recorder names the kernel's backward as their maker (autograd tells
// observers a node's inputs, not what it returns).
constexpr const char* kFusedKernelGradsScope = "titan::fused_kernel_grads";
// The optimizer's flat passes (trainer/components/optimizer.cpp); inputs: the element count
// and the element size in bytes (ints).
constexpr const char* kFusedAdamwScope = fused_kernel_name(FusedKernel::kAdamw).scope;
constexpr const char* kFusedSumSquaresScope = fused_kernel_name(FusedKernel::kSumSquares).scope;

// A meta tensor standing in for one fusable() takes: the real trainer would run the fused
// kernel where the recording has this tensor (same switch, same dtype rule).
inline bool fusable_on_meta(const torch::Tensor& t) {
  return t.defined() && t.is_meta() && t.layout() == torch::kStrided &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

// Rows per at::parallel_for chunk for rows of row_len elements: about 16K elements a chunk,
// so that small tensors stay on one thread.
inline int64_t row_grain(int64_t row_len) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(row_len, 1)); }

// Runs f(T{}) with T = float or double after t's dtype.
template <typename F>
auto dispatch_float(const torch::Tensor& t, F&& f) {
  if (t.scalar_type() == torch::kFloat64) return f(double{});
  return f(float{});
}

}  // namespace titan
