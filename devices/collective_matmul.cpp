// Async tensor parallelism's collective matmuls (see collective_matmul.h).
#include "devices/collective_matmul.h"

namespace titan::devices {
namespace {

bool is_matmul(const Kernel& k) { return k.category == op_kind_name(OpKind::kMatmul); }

// Takes no device time (a view, or a fused chain of views only).
bool is_free(const Kernel& k) { return k.exec_s <= 0 && k.launch_s <= 0; }

bool lead_is(const Kernel& k, const char* a, const char* b) { return k.lead && (*k.lead == a || *k.lead == b); }

// The data movement the trainer's sequence-parallel collectives add around the matmul:
// a collective matmul writes and reads the chunks in place instead, chunk by chunk.
bool is_layout_copy(const Kernel& k) {
  return k.category == op_kind_name(OpKind::kOther) && lead_is(k, "aten::clone", "aten::copy_");
}

// Element-wise math and reductions over the last dim, one row at a time: as separable along
// the sequence as the matmul is.
bool is_row_wise(const Kernel& k) {
  return k.category == op_kind_name(OpKind::kElementwise) || k.category == "reduction";
}

bool is_gradient_sum(const Kernel& k) {
  return k.category == op_kind_name(OpKind::kElementwise) && lead_is(k, "aten::add", "aten::add_");
}

}  // namespace

bool decomposes_with_matmul(const CollectiveDesc& c) {
  return c.group == kTensorParallelGroup &&
         (c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kReduceScatter);
}

KernelSpan matmuls_fed_by_gather(const std::vector<Kernel>& kernels) {
  KernelSpan s;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    if (is_matmul(k)) s.end = i + 1;
    else if (!is_free(k) && !is_layout_copy(k) && !(s.end == 0 && is_row_wise(k))) break;
  }
  return s;  // begin 0; end past the last matmul of the run (0: none)
}

KernelSpan matmuls_feeding_scatter(const std::vector<Kernel>& kernels, size_t from) {
  KernelSpan s{kernels.size(), kernels.size()};
  for (size_t i = kernels.size(); i > from; --i) {
    const Kernel& k = kernels[i - 1];
    if (is_matmul(k)) s.begin = i - 1;
    else if (!is_free(k) && !is_layout_copy(k) && !is_gradient_sum(k)) break;
  }
  return s;
}

}  // namespace titan::devices
