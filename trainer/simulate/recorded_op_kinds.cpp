// What the trace recorder knows of op names: which aten ops are metadata, reductions, data
// movement or write-only, which calls make a parent composite, and the op descriptors of the
// fused kernels' scopes (see recorded_op_kinds.h).
#include "trainer/simulate/recorded_op_kinds.h"

#include "common/error.h"
#include "devices/fused_ops.h"
#include "trainer/model/kernels/fused_kernels.h"

namespace titan {

using devices::OpDesc;

const std::unordered_set<std::string>& view_ops() {
  static const std::unordered_set<std::string> s = {
      "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias",
      "aten::transpose", "aten::t", "aten::expand", "aten::expand_as", "aten::permute",
      "aten::unsqueeze", "aten::squeeze", "aten::narrow", "aten::slice", "aten::select",
      "aten::as_strided", "aten::alias", "aten::detach", "aten::detach_", "aten::empty",
      "aten::empty_strided", "aten::empty_like", "aten::set_", "aten::resize_",
      "aten::lift_fresh", "aten::split", "aten::unbind", "aten::chunk", "aten::view_as",
      "aten::unfold", "aten::diagonal", "aten::to", "aten::contiguous", "aten::_to_copy_meta",
      "aten::numpy_T", "aten::flatten", "aten::split_with_sizes", "aten::new_empty",
      "aten::new_empty_strided", "aten::requires_grad_"};
  return s;
}

const std::unordered_set<std::string>& reduction_ops() {
  static const std::unordered_set<std::string> s = {
      "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min",
      "aten::_log_softmax", "aten::_softmax", "aten::_log_softmax_backward_data",
      "aten::_softmax_backward_data", "aten::norm", "aten::linalg_vector_norm", "aten::var",
      "aten::std", "aten::logsumexp", "aten::prod", "aten::argmax", "aten::cumsum"};
  return s;
}

const std::unordered_set<std::string>& movement_ops() {
  static const std::unordered_set<std::string> s = {
      "aten::cat", "aten::index", "aten::index_put_", "aten::_index_put_impl_", "aten::gather",
      "aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_",
      "aten::index_select", "aten::embedding", "aten::clone", "aten::masked_scatter",
      "aten::nonzero", "aten::index_add_", "aten::embedding_dense_backward"};
  return s;
}

bool writes_only(const std::string& n) {
  return n == "aten::zero_" || n == "aten::fill_" || n == "aten::normal_" ||
         n == "aten::uniform_" || n == "aten::random_" || n == "aten::zeros" ||
         n == "aten::ones" || n == "aten::full";
}

namespace {

const at::Tensor& input_tensor(c10::ArrayRef<const c10::IValue> in, size_t i, const std::string& scope) {
  TITAN_CHECK(in.size() > i && in[i].isTensor(), scope, ": expected a tensor as input ", i, " of the scope");
  return in[i].toTensor();
}

}  // namespace

bool fused_kernel_ops(const std::string& name, c10::ArrayRef<const c10::IValue> in, std::vector<OpDesc>* fwd,
                      std::vector<OpDesc>* bwd) {
  namespace d = devices;
  const FusedKernelName* kernel = fused_kernel_by_scope(name.c_str());
  if (kernel == nullptr) return false;
  if (!kernel->model_op) {
    // The optimizer's flat passes: (elements, element bytes, the tensors it touches); no backward.
    TITAN_CHECK(in.size() >= 2 && in[0].isInt() && in[1].isInt(), name, ": expected the element count and size");
    const int64_t e = in[0].toInt(), b = in[1].toInt();
    fwd->push_back(kernel->kernel == FusedKernel::kAdamw ? d::adamw_op(e, b) : d::sum_squares_op(e, b));
    return true;
  }
  const at::Tensor& x = input_tensor(in, 0, name);  // the kernel's main operand
  const int64_t b = static_cast<int64_t>(x.element_size()), last = std::max<int64_t>(1, x.size(-1));
  const int64_t rows = x.numel() / last;
  // The kernel's forward op and its backward op, from one builder taking `backward`.
  auto both = [&](auto op) {
    fwd->push_back(op(false));
    bwd->push_back(op(true));
  };
  switch (kernel->kernel) {
    case FusedKernel::kLinear: {
      const at::Tensor& w = input_tensor(in, 1, name);
      TITAN_CHECK(w.dim() == 2 && x.size(-1) == w.size(1), name, ": x [..., in] and weight [out, in]");
      fwd->push_back(d::linear_op(rows, w.size(1), w.size(0), b));
      *bwd = d::linear_backward_ops(rows, w.size(1), w.size(0), b, x.requires_grad(), w.requires_grad());
      break;
    }
    case FusedKernel::kRmsNorm: both([&](bool back) { return d::rms_norm_op(rows, last, b, back); }); break;
    case FusedKernel::kSwiglu: both([&](bool back) { return d::swiglu_op(x.numel(), b, back); }); break;
    case FusedKernel::kRope: {
      const int64_t table = input_tensor(in, 1, name).numel();
      both([&](bool back) { return d::rope_op(x.numel(), table, b, back); });
      break;
    }
    case FusedKernel::kCrossEntropy: both([&](bool back) { return d::cross_entropy_op(rows, last, b, back); }); break;
    case FusedKernel::kAttention: {
      const at::Tensor& k = input_tensor(in, 1, name);
      TITAN_CHECK(x.dim() == 4 && k.dim() == 4, name, ": q and k must be [B, H, S, D]");
      both([&](bool back) {
        return d::fused_attention_op({x.size(0), x.size(1), k.size(1), x.size(2), k.size(2), x.size(3), true, back}, b);
      });
      break;
    }
    case FusedKernel::kAdamw:
    case FusedKernel::kSumSquares: break;  // handled above
  }
  return true;
}

bool saved_for_backward(const std::string& scope, size_t input) {
  // RoPE's backward rotates the gradient back with the tables alone.
  return scope != kFusedRopeScope || input > 0;
}

bool in_place_for_real(const std::string& op, const std::string& parent) {
  return op == "aten::scatter_add" && parent == "aten::gather_backward";
}

bool query_op(const std::string& n) { return n == "aten::result_type"; }

// A parent is composite (its children carry its work) only if some child moves data:
// libtorch 1.13's pow calls result_type and a same-dtype `to` (both metadata) and computes in
// its own kernel, which counting those calls as children dropped from the trace.
bool counts_as_child(const std::string& n) { return !query_op(n) && !view_ops().count(n); }

}  // namespace titan
