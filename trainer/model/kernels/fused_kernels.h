// Which fused CPU kernels the model runs (trainer/model/kernels/*_kernel.h), and the test
// of whether a tensor can take them. Read by the model's modules and the loss; the trainer
// sets it from [training] fused_kernels. Off, or on tensors the kernels do not take (the
// meta device of the simulator, other devices, dtypes other than float and double), the
// model runs the composite ATen ops instead, so a recorded trace keeps its aten ops.
#pragma once

#include <torch/torch.h>

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
