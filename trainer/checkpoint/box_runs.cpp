#include "trainer/checkpoint/box_runs.h"

#include <algorithm>

#include "common/error.h"

namespace titan {

// A box (offset, shape per dim) of a global tensor and a flat range of its row-major
// flattening: valid when inside the tensor. Throws (damage) otherwise.
void check_box(const std::vector<int64_t>& global, const std::vector<int64_t>& off, const std::vector<int64_t>& shape,
               int64_t flat, int64_t n, const std::string& where) {
  TITAN_CHECK(off.size() == global.size() && shape.size() == global.size(), where, ": box rank differs from the tensor's");
  int64_t numel = 1;
  for (size_t d = 0; d < global.size(); ++d) {
    TITAN_CHECK(off[d] >= 0 && shape[d] >= 0 && off[d] + shape[d] <= global[d], where, ": box outside the tensor");
    numel *= shape[d];
  }
  TITAN_CHECK(flat >= 0 && n >= 0 && flat + n <= numel, where, ": flat range [", flat, ", ", flat + n,
              ") outside its box of ", numel, " elements");
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
