// Fused-kernel op descriptors (see fused_ops.h). FLOPs count the arithmetic of each kernel's
// formula per element (an exp counts as one); on every device these kernels are bound by
// their memory traffic, which is why the bytes are counted per tensor the kernel touches.
#include "devices/fused_ops.h"

#include <algorithm>
#include <cmath>

namespace titan::devices {
namespace {

OpDesc fused(const std::string& name, bool backward, int64_t read, int64_t written, double flops,
             int64_t dtype_bytes) {
  OpDesc op = pointwise_op(backward ? name + "_backward" : name, OpKind::kFused, read, written, flops);
  op.dtype_bytes = dtype_bytes;
  return op;
}

// Every op name a fused kernel gives its ops: the forward, and the backward's ("_backward",
// the linear's two gradient GEMMs instead).
const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const FusedKernelName& k : kFusedKernelNames) {
      n.push_back(k.op);
      if (!k.model_op) continue;
      if (k.kernel == FusedKernel::kLinear) {
        for (const char* suffix : {"_input_grad", "_weight_grad"}) n.push_back(std::string(k.op) + suffix);
      } else {
        n.push_back(std::string(k.op) + "_backward");
      }
    }
    return n;
  }();
  return names;
}

}  // namespace

// "@hd=<int>,s=<int>" after an attention op name: the shape it was measured at.
bool parse_shape_suffix(const std::string& suffix, int64_t* hd, int64_t* seq) {
  size_t used = 0;
  if (suffix.rfind("@hd=", 0) != 0) return false;
  try {
    *hd = std::stoll(suffix.substr(4), &used);
    const std::string rest = suffix.substr(4 + used);
    if (rest.rfind(",s=", 0) != 0) return false;
    *seq = std::stoll(rest.substr(3), &used);
    return used == rest.size() - 3 && *hd > 0 && *seq > 0;
  } catch (const std::exception&) {
    return false;
  }
}

bool is_fused_kernel_op(const std::string& name) {
  std::string base = name;
  const size_t at = name.find('@');
  if (at != std::string::npos) {
    base = name.substr(0, at);
    int64_t hd = 0, seq = 0;
    if (base.rfind(kFusedAttentionOp, 0) != 0 || !parse_shape_suffix(name.substr(at), &hd, &seq)) return false;
  }
  for (const std::string& n : op_names())
    if (n == base) return true;
  return false;
}

std::string fused_kernel_op_names() {
  std::string s;
  for (const std::string& n : op_names()) s += (s.empty() ? "" : " ") + n;
  return s + " (attention also as <name>@hd=<head_dim>,s=<sequence>)";
}

std::string with_attention_shape(const std::string& name, int64_t head_dim, int64_t seq) {
  return name + "@hd=" + std::to_string(head_dim) + ",s=" + std::to_string(seq);
}

double measured_kernel_rate(const std::map<std::string, double>& rates, const OpDesc& op) {
  if (auto it = rates.find(op.name); it != rates.end()) return it->second;
  if (op.kind != OpKind::kAttention || op.attn.head_dim <= 0 || op.attn.q_len <= 0) return 0;
  // The grid: rate[(log head_dim, log seq)] for this op's measurements.
  std::map<std::pair<double, double>, double> grid;
  std::vector<double> dims, seqs;
  const std::string prefix = op.name + "@";
  for (auto it = rates.lower_bound(prefix); it != rates.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    int64_t hd = 0, seq = 0;
    if (!parse_shape_suffix(it->first.substr(op.name.size()), &hd, &seq)) continue;
    const double x = std::log(static_cast<double>(hd)), y = std::log(static_cast<double>(seq));
    grid[{x, y}] = it->second;
    dims.push_back(x);
    seqs.push_back(y);
  }
  if (grid.empty()) return 0;
  // The two grid lines around v (equal at or beyond the edges) and v's weight between them.
  auto bracket = [](std::vector<double> v, double at, double* lo, double* hi) {
    std::sort(v.begin(), v.end());
    at = std::clamp(at, v.front(), v.back());
    *hi = *std::lower_bound(v.begin(), v.end(), at);
    *lo = *hi == at ? *hi : *(std::lower_bound(v.begin(), v.end(), at) - 1);
    return *hi > *lo ? (at - *lo) / (*hi - *lo) : 0.0;
  };
  double x0, x1, y0, y1;
  const double wx = bracket(dims, std::log(static_cast<double>(op.attn.head_dim)), &x0, &x1);
  const double wy = bracket(seqs, std::log(static_cast<double>(op.attn.q_len)), &y0, &y1);
  auto at = [&](double x, double y) {
    auto it = grid.find({x, y});
    return it == grid.end() ? 0.0 : it->second;
  };
  const double r00 = at(x0, y0), r10 = at(x1, y0), r01 = at(x0, y1), r11 = at(x1, y1);
  if (r00 <= 0 || r10 <= 0 || r01 <= 0 || r11 <= 0) return 0;  // not a full grid
  return (1 - wx) * (1 - wy) * r00 + wx * (1 - wy) * r10 + (1 - wx) * wy * r01 + wx * wy * r11;
}

OpDesc rms_norm_op(int64_t rows, int64_t n, int64_t b, bool backward) {
  const int64_t e = rows * n;
  // Forward reads x and w, writes y and rstd: x^2 summed, then x * rstd * w (4 per element).
  if (!backward) return fused(kFusedRmsNormOp, false, (e + n) * b, (e + rows) * b, 4.0 * e, b);
  // Backward reads x, w, dy, rstd and writes dx and a double dw row: dot(dy w, x) (3), dx (4),
  // dw += dy x rstd (3).
  return fused(kFusedRmsNormOp, true, (2 * e + n + rows) * b, e * b + n * 8, 10.0 * e, b);
}

OpDesc swiglu_op(int64_t e, int64_t b, bool backward) {
  // Forward reads a, b, writes y: a / (1 + exp(-a)) * b (5 per element).
  if (!backward) return fused(kFusedSwigluOp, false, 2 * e * b, e * b, 5.0 * e, b);
  // Backward reads a, b, dy, writes da, db: sigmoid (3), da (6), db (2).
  return fused(kFusedSwigluOp, true, 3 * e * b, 2 * e * b, 11.0 * e, b);
}

OpDesc rope_op(int64_t e, int64_t table, int64_t b, bool backward) {
  // Reads x (or dy) and the two float tables, writes y (or dx): x cos + rotate(x) sin.
  return fused(kFusedRopeOp, backward, e * b + 2 * table * 4, e * b, 3.0 * e, b);
}

OpDesc cross_entropy_op(int64_t rows, int64_t vocab, int64_t b, bool backward) {
  const int64_t e = rows * vocab;
  // Forward reads logits and labels, writes each row's log-sum-exp and loss: running max,
  // x - max, exp, sum (4 per element).
  if (!backward) return fused(kFusedCrossEntropyOp, false, e * b + rows * 8, 2 * rows * b, 4.0 * e, b);
  // Backward reads logits, labels and lse, writes softmax - one_hot: x - lse, exp, scale (3).
  return fused(kFusedCrossEntropyOp, true, e * b + rows * (8 + b), e * b, 3.0 * e, b);
}

OpDesc adamw_op(int64_t e, int64_t b) {
  // decay, two moment updates, sqrt, divide, step: about 12 per element.
  return fused(kFusedAdamwOp, false, 4 * e * b, 3 * e * b, 12.0 * e, b);
}

OpDesc sum_squares_op(int64_t e, int64_t b) { return fused(kFusedSumSquaresOp, false, e * b, 8, 2.0 * e, b); }

OpDesc linear_op(int64_t rows, int64_t in, int64_t out, int64_t b) {
  return matmul_op(kFusedLinearOp, {1, rows, out, in}, b);
}

std::vector<OpDesc> linear_backward_ops(int64_t rows, int64_t in, int64_t out, int64_t b, bool input_grad,
                                        bool weight_grad) {
  std::vector<OpDesc> ops;
  const std::string name = kFusedLinearOp;
  if (input_grad) ops.push_back(matmul_op(name + "_input_grad", {1, rows, in, out}, b));     // dy [rows, out] w
  if (weight_grad) ops.push_back(matmul_op(name + "_weight_grad", {1, out, in, rows}, b));  // dy^T x
  return ops;
}

OpDesc fused_attention_op(AttentionShape s, int64_t b) {
  OpDesc op = attention_op(s, b);
  op.name = std::string(kFusedAttentionOp) + (s.backward ? "_backward" : "");
  return op;
}

}  // namespace titan::devices
