#include "trainer/model/grouped_matmul.h"

#include <ATen/record_function.h>

#include <numeric>

#include "common/error.h"
#include "trainer/model/kernels/meta_kernel.h"

namespace titan {

torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts) {
  TITAN_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2), "grouped matmul: x [M, in] and w [E, out, in]");
  TITAN_CHECK(static_cast<int64_t>(counts.size()) == w.size(0), "grouped matmul: ", counts.size(),
              " token counts for ", w.size(0), " experts");
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  TITAN_CHECK(rows == x.size(0), "grouped matmul: counts sum to ", rows, " for ", x.size(0), " rows");
  // Everything below, backward nodes included, is the one kernel a recording keeps.
  RECORD_FUNCTION(kGroupedMatmulScope, std::vector<c10::IValue>({x, w, c10::IValue(counts)}));
  // A recording that keeps the scope as one grouped GEMM sees none of the loop below (with no
  // rows, the loop's empty output has no gradient: it runs as it is).
  if (x.is_meta() && meta_records_grouped_matmul_kernel() && rows > 0) {
    torch::Tensor out = meta_grouped_matmul_stand_in(x, w);
    if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out});
    return out;
  }
  // unbind (one view per expert): its backward stacks the experts' weight gradients once,
  // where indexing per expert would add a zero-filled [E, ...] gradient per expert. Likewise
  // split: its backward concatenates the blocks' gradients, where narrow's would add a
  // zero-filled [M, in] gradient per expert.
  auto w_e = w.unbind(0);
  auto blocks = x.split_with_sizes(counts, 0);
  std::vector<torch::Tensor> outs;
  for (size_t e = 0; e < counts.size(); ++e)
    if (counts[e] > 0) outs.push_back(torch::mm(blocks[e], w_e[e].t()));
  torch::Tensor out = outs.empty()       ? torch::zeros({0, w.size(1)}, x.options())
                      : outs.size() == 1 ? outs[0]
                                         : torch::cat(outs, 0);
  if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out});
  return out;
}

}  // namespace titan
