// Multi-rank tests of every Communicator op, dtype and mode against a single-process
// computation; run under mpirun with 2 and 4 ranks for each backend (mpi_tests.cmake).
// all_to_all_single: all_to_all_multirank.cpp; fused mode running asynchronously:
// fused_async_multirank.cpp. This file holds the binary's main.
#include <sys/resource.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "common/error.h"
#include "tests/collectives/multirank_data.h"
#include "tests/collectives/multirank_main.h"

namespace titan {
namespace {

using titan::testing::world;

TEST(Collectives, AllReduceEveryDtypeOpAndModeIncludingUnevenSizes) {
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    const int n = comm->size();
    for (auto dtype : kDtypes)
      for (auto op : kOps)
        for (int64_t numel : {1, 7, 1000, 10001}) {  // fewer than / not divisible by ranks; 10001: large path
          auto t = data(comm->rank(), numel, dtype);
          comm->all_reduce(t, op)->wait();
          EXPECT_TRUE(torch::equal(t, expected_reduce(all_ranks(n, numel, dtype), op)))
              << label(mode, dtype, op) << " numel " << numel;
        }
  }
}

TEST(Collectives, AllGatherReduceScatterAllToAllBroadcast) {
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    const int n = comm->size();
    const int me = comm->rank();
    for (auto dtype : kDtypes) {
      const int64_t m = 5;  // per-rank block, deliberately odd
      auto out = torch::empty({n * m}, dtype);
      comm->all_gather(out, data(me, m, dtype))->wait();
      EXPECT_TRUE(torch::equal(out, torch::cat(all_ranks(n, m, dtype)))) << mode;

      for (auto op : kOps) {
        auto rs = torch::empty({m}, dtype);
        comm->reduce_scatter(rs, data(me, n * m, dtype), op)->wait();
        auto full = expected_reduce(all_ranks(n, n * m, dtype), op);
        EXPECT_TRUE(torch::equal(rs, full.narrow(0, me * m, m))) << label(mode, dtype, op);
      }

      auto a2a = torch::empty({n * m}, dtype);
      comm->all_to_all(a2a, data(me, n * m, dtype))->wait();
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(torch::equal(a2a.narrow(0, r * m, m), data(r, n * m, dtype).narrow(0, me * m, m)))
            << mode << " all_to_all block " << r;

      auto b = data(me, 9, dtype);
      comm->broadcast(b, n - 1)->wait();
      EXPECT_TRUE(torch::equal(b, data(n - 1, 9, dtype))) << mode << " broadcast";
    }
    comm->barrier()->wait();
  }
}

// Blocks larger than TransportCommunicator::kScratchBytes are exchanged and reduced in
// chunks; uneven block sizes make the ranks' last chunks differ in length.
TEST(Collectives, ReductionsLargerThanTheScratchBufferGoInChunks) {
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    const int n = comm->size();
    const int me = comm->rank();
    const int64_t numel = 2'500'003;  // 10 MB of float32: 2 or more chunks per rank
    auto t = data(me, numel, at::kFloat);
    comm->all_reduce(t)->wait();
    EXPECT_TRUE(torch::equal(t, expected_reduce(all_ranks(n, numel, at::kFloat), ReduceOp::kSum)))
        << mode << " all_reduce";
    const int64_t m = 1'100'001;
    auto rs = torch::empty({m});
    comm->reduce_scatter(rs, data(me, n * m, at::kFloat), ReduceOp::kAvg)->wait();
    auto full = expected_reduce(all_ranks(n, n * m, at::kFloat), ReduceOp::kAvg);
    EXPECT_TRUE(torch::equal(rs, full.narrow(0, me * m, m))) << mode << " reduce_scatter";
  }
}

TEST(Collectives, SendRecvRing) {
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    const int n = comm->size();
    const int me = comm->rank();
    auto mine = data(me, 100000, at::kFloat);  // large enough for MPI's rendezvous protocol
    auto got = torch::empty_like(mine);
    // Even ranks send first and odd ranks receive first, so blocking sends cannot deadlock.
    if (me % 2 == 0) {
      comm->send(mine, (me + 1) % n, 3)->wait();
      comm->recv(got, (me - 1 + n) % n, 3)->wait();
    } else {
      comm->recv(got, (me - 1 + n) % n, 3)->wait();
      comm->send(mine, (me + 1) % n, 3)->wait();
    }
    EXPECT_TRUE(torch::equal(got, data((me - 1 + n) % n, 100000, at::kFloat))) << mode;
  }
}

TEST(Collectives, ListOpsFusedAndSeparateAreBitIdenticalAndCorrect) {
  const int n = world().size();
  const int me = world().rank();
  // Random float32 data: any change in the order of additions would show in the bits.
  torch::manual_seed(1234 + me);
  std::vector<at::Tensor> base;
  std::vector<std::vector<at::Tensor>> per_rank(n);
  for (int i = 0; i < 30; ++i) {
    const int64_t numel = 1 + (i * 37) % 300;
    const auto dtype = kDtypes[i % 3];
    base.push_back(dtype == at::kLong ? data(me, numel, dtype, i)
                                      : torch::randn({numel}).mul(100).to(dtype));
  }
  // Everyone's inputs, to compute the expected values locally.
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(1234 + r);
    for (int i = 0; i < 30; ++i) {
      const int64_t numel = 1 + (i * 37) % 300;
      const auto dtype = kDtypes[i % 3];
      per_rank[r].push_back(dtype == at::kLong ? data(r, numel, dtype, i)
                                               : torch::randn({numel}).mul(100).to(dtype));
    }
  }
  std::map<std::string, std::vector<at::Tensor>> results;
  for (const auto& mode : kModes) {
    std::vector<at::Tensor> ts;
    for (const auto& t : base) ts.push_back(t.clone());
    auto work = world(mode).comm()->all_reduce(ts, ReduceOp::kSum);
    work->wait();
    EXPECT_TRUE(work->is_done());
    results[mode] = ts;
  }
  for (int i = 0; i < 30; ++i) {
    std::vector<at::Tensor> xs;
    for (int r = 0; r < n; ++r) xs.push_back(per_rank[r][i]);
    EXPECT_TRUE(torch::equal(results["fused"][i], results["separate"][i])) << "tensor " << i;
    EXPECT_TRUE(torch::equal(results["fused"][i], expected_reduce(xs, ReduceOp::kSum)))
        << "tensor " << i;
  }

  // all_gather and reduce_scatter lists, with 2-d tensors.
  for (const auto& mode : kModes) {
    auto& comm = world(mode).comm();
    std::vector<at::Tensor> ins, outs, rs_ins, rs_outs;
    for (int i = 0; i < 12; ++i) {
      const auto dtype = kDtypes[i % 3];
      ins.push_back(data(me, 3 * (i + 1), dtype, i).view({3, i + 1}));
      outs.push_back(torch::empty({3 * n, i + 1}, dtype));
      rs_ins.push_back(data(me, n * 2 * (i + 1), dtype, i).view({n * 2, i + 1}));
      rs_outs.push_back(torch::empty({2, i + 1}, dtype));
    }
    auto w1 = comm->all_gather(outs, ins);
    auto w2 = comm->reduce_scatter(rs_outs, rs_ins, ReduceOp::kAvg);
    w1->wait();
    w2->wait();
    for (int i = 0; i < 12; ++i) {
      const auto dtype = kDtypes[i % 3];
      std::vector<at::Tensor> gathered, full;
      for (int r = 0; r < n; ++r) {
        gathered.push_back(data(r, 3 * (i + 1), dtype, i));
        full.push_back(data(r, n * 2 * (i + 1), dtype, i));
      }
      EXPECT_TRUE(torch::equal(outs[i].view({-1}), torch::cat(gathered))) << mode << " " << i;
      auto red = expected_reduce(full, ReduceOp::kAvg).view({n, -1})[me];
      EXPECT_TRUE(torch::equal(rs_outs[i].view({-1}), red)) << mode << " " << i;
    }
  }
}

TEST(Collectives, SmallAndLargeAllReducePathsAgreeBitwise) {
  auto& comm = world("separate").comm();
  torch::manual_seed(99 + comm->rank());
  auto whole = torch::randn({50000});  // 200 KB: reduce-scatter + all-gather path
  std::vector<at::Tensor> pieces;
  for (const auto& p : whole.split(1000)) pieces.push_back(p.clone());  // 4 KB: small path
  comm->all_reduce(whole)->wait();
  comm->all_reduce(pieces)->wait();
  EXPECT_TRUE(torch::equal(whole, torch::cat(pieces)));
}

TEST(Collectives, WrongSizesFailAtIssueWithAClearMessage) {
  auto& comm = world().comm();
  const int n = comm->size();
  try {
    comm->reduce_scatter(torch::empty({3}), torch::empty({3 * n + 1}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pad the input"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm->all_to_all(torch::empty({n + 1}), torch::empty({n + 1})), Error);
}

TEST(Collectives, SubGroupsOfTheWorld) {
  // Even and odd ranks form two groups; each sums its members' ranks.
  auto& w = world();
  std::vector<int> members;
  for (int r = w.rank() % 2; r < w.size(); r += 2) members.push_back(r);
  auto g = w.new_group(members, w.rank() % 2 ? "odd" : "even");
  auto t = torch::full({4}, static_cast<int64_t>(w.rank()), torch::kLong);
  g->all_reduce(t)->wait();
  int64_t sum = 0;
  for (int r : members) sum += r;
  EXPECT_TRUE(torch::equal(t, torch::full({4}, sum, torch::kLong)));
  EXPECT_EQ(g->global_ranks(), members);
}

// TITAN_GLOO_DEVICE_NICE (mpi_tests.cmake passes 19) lowers gloo's device threads, one per
// World, and no other thread of the rank.
TEST(Collectives, GlooDeviceThreadsRunAtTheNiceValueAsked) {
  const char* asked = std::getenv("TITAN_GLOO_DEVICE_NICE");
  const int want = asked ? std::atoi(asked) : 0;
  if (titan::testing::backend_flag() != "gloo" || want == 0 || world().size() == 1)
    GTEST_SKIP() << "gloo with TITAN_GLOO_DEVICE_NICE above 0 only";
  (void)world("separate");
  int lowered = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    const auto tid = static_cast<id_t>(std::stoul(e.path().filename()));
    const int nice = getpriority(PRIO_PROCESS, tid);
    if (tid == static_cast<id_t>(getpid())) EXPECT_EQ(nice, 0) << "the main thread";
    else if (nice == want) ++lowered;
    else EXPECT_EQ(nice, 0) << "thread " << tid;
  }
  EXPECT_EQ(lowered, 2) << "two Worlds (fused, separate), a device thread each";
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) { return titan::testing::run_multirank_main(argc, argv); }
