#include "collectives/reduce_kernels.h"

#include <c10/util/BFloat16.h>

#include <algorithm>

#include "common/error.h"

namespace titan {

namespace {

// Accumulator type per element type: bfloat16 sums in float so rounding happens once.
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<c10::BFloat16> {
  using type = float;
};

template <typename T>
void reduce_typed(ReduceOp op, const void* const* inputs, size_t n, void* out_raw,
                  int64_t count) {
  using A = typename Acc<T>::type;
  // Blocks keep the accumulator in L1 and let out alias an input: a block is fully read
  // before it is written.
  constexpr int64_t kBlock = 1024;
  A acc[kBlock];
  T* out = static_cast<T*>(out_raw);
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t len = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<A>(first[i]);
    for (size_t r = 1; r < n; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + base;
      if (op == ReduceOp::kMax) {
        for (int64_t i = 0; i < len; ++i) acc[i] = std::max(acc[i], static_cast<A>(in[i]));
      } else {
        for (int64_t i = 0; i < len; ++i) acc[i] += static_cast<A>(in[i]);
      }
    }
    if (op == ReduceOp::kAvg) {
      const A div = static_cast<A>(n);
      for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] / div;
    }
    for (int64_t i = 0; i < len; ++i) out[base + i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

bool reducible_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

void reduce_ordered(at::ScalarType dtype, ReduceOp op, const void* const* inputs, size_t n,
                    void* out, int64_t count) {
  TITAN_CHECK(n > 0, "reduce_ordered: no inputs");
  switch (dtype) {
    case at::kFloat:
      return reduce_typed<float>(op, inputs, n, out, count);
    case at::kDouble:
      return reduce_typed<double>(op, inputs, n, out, count);
    case at::kBFloat16:
      return reduce_typed<c10::BFloat16>(op, inputs, n, out, count);
    case at::kInt:
      return reduce_typed<int32_t>(op, inputs, n, out, count);
    case at::kLong:
      return reduce_typed<int64_t>(op, inputs, n, out, count);
    default:
      TITAN_FAIL("reduce: dtype ", c10::toString(dtype),
                 " is not supported (float32, float64, bfloat16, int32, int64)");
  }
}

}  // namespace titan
