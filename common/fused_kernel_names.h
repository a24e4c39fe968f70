// The fused CPU kernels (trainer/model/kernels/) by name, once. Each kernel is seen under two
// names: the profiling scope the model or optimizer opens around it on the meta device, which
// the trace recorder keeps as one kernel (trainer/model/kernels/fused_kernels.h), and the op
// the simulator prices, whose name keys the cpu device's measured rates (devices/fused_ops.h).
// Keeping both in one row means a kernel cannot gain a scope without an op, or be renamed on
// one side only.
#pragma once

#include <cstddef>
#include <cstring>

namespace titan {

enum class FusedKernel { kLinear, kRmsNorm, kSwiglu, kRope, kCrossEntropy, kAttention, kAdamw, kSumSquares };

struct FusedKernelName {
  FusedKernel kernel;
  const char* scope;  // RecordFunction scope name on the meta device
  const char* op;     // OpDesc::name of its forward; backward ops add suffixes (fused_ops.h)
  bool model_op;      // a model op with a backward (not one of the optimizer's flat passes)
};

inline constexpr FusedKernelName kFusedKernelNames[] = {
    {FusedKernel::kLinear, "titan::fused_linear", "titan::linear", true},
    {FusedKernel::kRmsNorm, "titan::fused_rms_norm", "titan::rms_norm", true},
    {FusedKernel::kSwiglu, "titan::fused_swiglu", "titan::swiglu", true},
    {FusedKernel::kRope, "titan::fused_rope", "titan::rope", true},
    {FusedKernel::kCrossEntropy, "titan::fused_cross_entropy", "titan::cross_entropy", true},
    {FusedKernel::kAttention, "titan::fused_attention", "titan::fused_attention", true},
    {FusedKernel::kAdamw, "titan::fused_adamw", "titan::adamw", false},
    {FusedKernel::kSumSquares, "titan::fused_sum_squares", "titan::sum_squares", false},
};

// fused_kernel_name indexes the table by the enum, so the rows must stay in its order.
constexpr bool fused_kernel_rows_in_enum_order() {
  for (std::size_t i = 0; i < sizeof(kFusedKernelNames) / sizeof(kFusedKernelNames[0]); ++i)
    if (static_cast<std::size_t>(kFusedKernelNames[i].kernel) != i) return false;
  return true;
}
static_assert(fused_kernel_rows_in_enum_order(), "kFusedKernelNames rows out of FusedKernel order");

constexpr const FusedKernelName& fused_kernel_name(FusedKernel k) {
  return kFusedKernelNames[static_cast<std::size_t>(k)];
}

// The row whose scope is `scope`, nullptr when none is.
inline const FusedKernelName* fused_kernel_by_scope(const char* scope) {
  for (const FusedKernelName& n : kFusedKernelNames)
    if (std::strcmp(n.scope, scope) == 0) return &n;
  return nullptr;
}

}  // namespace titan
