#include "parallel/pipeline_orders.h"

#include <algorithm>

namespace titan {

PipeOrder gpipe_order(int p, int m) {
  PipeOrder out(p);
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < m; ++k) out[r].push_back({PipeOp::kForward, r, k});
    for (int k = 0; k < m; ++k) out[r].push_back({PipeOp::kBackward, r, k});
  }
  return out;
}

PipeOrder interleaved_order(int p, int v, int m) {
  PipeOrder out(p);
  const int total = m * v;
  for (int r = 0; r < p; ++r) {
    // The k-th forward (backward) of the rank: micro-batches go in groups of p through one
    // stage of the rank before the next stage; backwards visit the stages in reverse.
    auto nth = [&](int k, PipeOp op) {
      const int chunk = (k / p) % v;
      const int stage = (op == PipeOp::kForward ? chunk : v - 1 - chunk) * p + r;
      return PipeAction{op, stage, (k / (p * v)) * p + k % p};
    };
    const int warmup = std::min(total, v == 1 ? p - 1 - r : (p - 1 - r) * 2 + (v - 1) * p);
    auto& list = out[r];
    for (int k = 0; k < warmup; ++k) list.push_back(nth(k, PipeOp::kForward));
    for (int j = 0; j + warmup < total; ++j) {
      list.push_back(nth(warmup + j, PipeOp::kForward));
      list.push_back(nth(j, PipeOp::kBackward));
    }
    for (int k = total - warmup; k < total; ++k) list.push_back(nth(k, PipeOp::kBackward));
  }
  return out;
}

}  // namespace titan
