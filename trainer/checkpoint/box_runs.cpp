#include "trainer/checkpoint/box_runs.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace titan {

namespace {

// a * b for non-negative a, b; false when it would not fit in int64 (a damaged file's sizes
// must give an error, not signed overflow).
bool mul_fits(int64_t a, int64_t b, int64_t* out) {
  if (b != 0 && a > std::numeric_limits<int64_t>::max() / b) return false;
  *out = a * b;
  return true;
}

}  // namespace

// A box (offset, shape per dim) of a global tensor and a flat range of its row-major
// flattening: valid when inside the tensor. Throws (damage) otherwise. Every sum and product
// is checked before it is formed: the figures come from a file.
void check_box(const std::vector<int64_t>& global, const std::vector<int64_t>& off, const std::vector<int64_t>& shape,
               int64_t flat, int64_t n, const std::string& where) {
  TITAN_CHECK(off.size() == global.size() && shape.size() == global.size(), where, ": box rank differs from the tensor's");
  int64_t numel = 1, global_numel = 1;
  for (size_t d = 0; d < global.size(); ++d) {
    TITAN_CHECK(global[d] >= 0 && off[d] >= 0 && shape[d] >= 0 && off[d] <= global[d] - shape[d], where,
                ": box outside the tensor");
    TITAN_CHECK(mul_fits(numel, shape[d], &numel) && mul_fits(global_numel, global[d], &global_numel), where,
                ": tensor of ", global.size(), " dims has more elements than int64 holds");
  }
  TITAN_CHECK(flat >= 0 && n >= 0 && n <= numel && flat <= numel - n, where, ": flat range of ", n,
              " elements from ", flat, " outside its box of ", numel, " elements");
}

// Elements [flat, flat + n) of the flattened box as contiguous global runs, in increasing
// global order. Dims after the last split dim k are whole, so a box row of shape[k] * (inner
// elements) is contiguous globally; the whole tensor is one run.
std::vector<Run> box_runs(const std::vector<int64_t>& global, const std::vector<int64_t>& off,
                          const std::vector<int64_t>& shape, int64_t flat, int64_t n) {
  const int64_t nd = static_cast<int64_t>(global.size());
  int64_t k = nd - 1;
  while (k >= 0 && off[k] == 0 && shape[k] == global[k]) --k;
  if (k < 0) return {{flat, 0, n}};
  std::vector<int64_t> stride(nd, 1);
  for (int64_t d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  const int64_t row = shape[k] * stride[k];
  std::vector<Run> out;
  for (int64_t i = flat; i < flat + n;) {
    int64_t q = i / row, g = off[k] * stride[k] + i % row;
    for (int64_t d = k - 1; d >= 0; --d) {
      g += (q % shape[d] + off[d]) * stride[d];
      q /= shape[d];
    }
    const int64_t len = std::min(row - i % row, flat + n - i);
    out.push_back({g, i - flat, len});
    i += len;
  }
  return out;
}

}  // namespace titan
