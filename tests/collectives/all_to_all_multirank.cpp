// Multi-rank tests of all_to_all_single (all-to-all-v, as expert parallelism dispatches
// tokens) in both collective modes and every dtype, and its bad splits failing at issue.
// Part of the collectives_multirank binary (mpi_tests.cmake).
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "tests/collectives/multirank_data.h"
#include "tests/collectives/multirank_main.h"

namespace titan {
namespace {

using titan::testing::world;

// all_to_all_single with uneven splits (all-to-all-v), as expert parallelism dispatches
// tokens: rank s sends rows(s, d) rows of width 3 to rank d, some of them zero, and the
// receiver checks every row against what the sender built. Several ops are issued before
// the first wait, so fused mode runs them queued on the progress thread.
int64_t a2a_rows(int src, int dst) { return (src * 3 + dst * 5) % 4; }  // 0..3, zeros included

at::Tensor a2a_block(int src, int dst, at::ScalarType dtype, int salt) {
  auto base = torch::arange(a2a_rows(src, dst) * 3, torch::kLong).view({-1, 3});
  return (base + src * 100 + dst * 10 + salt).to(dtype);
}

TEST(Collectives, AllToAllSingleWithUnevenSplits) {
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    const int n = comm->size();
    const int me = comm->rank();
    for (auto dtype : kDtypes) {
      std::vector<at::Tensor> outs;
      std::vector<WorkPtr> works;
      for (int salt = 0; salt < 3; ++salt) {
        std::vector<at::Tensor> blocks;
        std::vector<int64_t> in_splits, out_splits;
        int64_t out_rows = 0;
        for (int r = 0; r < n; ++r) {
          blocks.push_back(a2a_block(me, r, dtype, salt));
          in_splits.push_back(a2a_rows(me, r));
          out_splits.push_back(a2a_rows(r, me));
          out_rows += a2a_rows(r, me);
        }
        auto out = torch::full({out_rows, 3}, -1, dtype);
        works.push_back(comm->all_to_all_single(out, torch::cat(blocks), out_splits, in_splits));
        outs.push_back(out);
      }
      for (int salt = 0; salt < 3; ++salt) {
        works[salt]->wait();
        std::vector<at::Tensor> want;
        for (int r = 0; r < n; ++r) want.push_back(a2a_block(r, me, dtype, salt));
        EXPECT_TRUE(torch::equal(outs[salt], torch::cat(want)))
            << mode << " " << c10::toString(dtype) << " salt " << salt;
      }
    }
    // Empty splits: equal row blocks, the same as all_to_all on rows.
    auto in = data(me, n * 4 * 2, at::kFloat).view({n * 4, 2});
    auto out = torch::empty_like(in);
    comm->all_to_all_single(out, in, {}, {})->wait();
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(torch::equal(out.narrow(0, r * 4, 4),
                               data(r, n * 4 * 2, at::kFloat).view({n * 4, 2}).narrow(0, me * 4, 4)))
          << mode << " equal splits block " << r;
    // Non-contiguous out: written back through a copy.
    auto wide = torch::zeros({n * 4, 4});
    comm->all_to_all_single(wide.narrow(1, 1, 2), in, {}, {})->wait();
    EXPECT_TRUE(torch::equal(wide.narrow(1, 1, 2), out)) << mode << " non-contiguous out";
  }
}

TEST(Collectives, AllToAllSingleBadSplitsFailAtIssue) {
  auto& comm = world().comm();
  const int n = comm->size();
  auto expect_error = [](auto&& f, const char* needle) {
    try {
      f();
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::vector<int64_t> ones(n, 1);
  expect_error([&] { comm->all_to_all_single(torch::empty({n, 2}), torch::empty({n + 1, 2}), ones, ones); },
               "sum to");
  expect_error([&] { comm->all_to_all_single(torch::empty({n, 2}), torch::empty({n, 2}), ones, {1}); },
               "entries, group size");
  expect_error([&] { comm->all_to_all_single(torch::empty({n, 3}), torch::empty({n, 2}), ones, ones); },
               "differ in shape");
  expect_error([&] { comm->all_to_all_single(torch::empty({n + 1, 2}), torch::empty({n + 1, 2}), {}, {}); },
               "equal blocks");
}

}  // namespace
}  // namespace titan
