// nbytes() and with_contiguous(): how Communicator hands caller tensors to the backend
// hooks without a copy or a new view when they are contiguous already. Used by
// communicator.cpp and communicator_lists.cpp only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace titan {

inline int64_t nbytes(const at::Tensor& t) {
  return t.numel() * static_cast<int64_t>(t.element_size());
}

// Runs fn on t itself when it is contiguous or on a contiguous copy that is written back
// afterwards.
template <typename F>
void with_contiguous(const at::Tensor& t, F&& fn) {
  if (t.is_contiguous()) return fn(t);
  at::Tensor c = t.contiguous();
  fn(c);
  t.copy_(c);
}

}  // namespace titan
