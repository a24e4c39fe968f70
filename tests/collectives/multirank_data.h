// The data of the multi-rank collective tests: each rank's input (small integers, exact in
// every dtype), the single-process answer of a reduction, and the dtypes, ops and modes the
// tests cover. Shared by the sources of the collectives_multirank binary (mpi_tests.cmake).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace titan {

inline const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kLong};
inline const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
inline const std::vector<std::string> kModes = {"fused", "separate"};

// Rank r's input: small integers, exact in every dtype. salt varies the pattern per tensor.
inline at::Tensor data(int rank, int64_t numel, at::ScalarType dtype, int salt = 0) {
  auto i = torch::arange(numel, torch::kLong);
  return ((i * 7 + rank * 13 + salt * 5) % 17 - 8).to(dtype);
}

// The single-process answer: combine all ranks' inputs in rank order, as the spec says.
inline at::Tensor expected_reduce(const std::vector<at::Tensor>& xs, ReduceOp op) {
  const auto dtype = xs[0].scalar_type();
  const auto acc_type = dtype == at::kBFloat16 ? at::kFloat : dtype;
  at::Tensor acc = xs[0].to(acc_type);
  for (size_t r = 1; r < xs.size(); ++r) {
    at::Tensor x = xs[r].to(acc_type);
    acc = op == ReduceOp::kMax ? at::maximum(acc, x) : acc + x;
  }
  if (op == ReduceOp::kAvg) {
    const int64_t n = static_cast<int64_t>(xs.size());
    acc = at::isIntegralType(acc_type, false) ? at::div(acc, n, "trunc") : acc / n;
  }
  return acc.to(dtype);
}

inline std::vector<at::Tensor> all_ranks(int n, int64_t numel, at::ScalarType dtype, int salt = 0) {
  std::vector<at::Tensor> xs;
  for (int r = 0; r < n; ++r) xs.push_back(data(r, numel, dtype, salt));
  return xs;
}

inline std::string label(const std::string& mode, at::ScalarType dtype, ReduceOp op) {
  return mode + " " + c10::toString(dtype) + " " + reduce_op_name(op);
}

}  // namespace titan
