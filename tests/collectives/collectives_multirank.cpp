// Multi-rank tests of every Communicator op, dtype and mode against a single-process
// computation; run under mpirun with 2 and 4 ranks for each backend (mpi_tests.cmake).
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "tests/collectives/multirank_main.h"

namespace titan {
namespace {

using titan::testing::world;

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kBFloat16, at::kLong};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
const std::vector<std::string> kModes = {"fused", "separate"};

// Rank r's input: small integers, exact in every dtype. salt varies the pattern per tensor.
at::Tensor data(int rank, int64_t numel, at::ScalarType dtype, int salt = 0) {
  auto i = torch::arange(numel, torch::kLong);
  return ((i * 7 + rank * 13 + salt * 5) % 17 - 8).to(dtype);
}

// The single-process answer: combine all ranks' inputs in rank order, as the spec says.
at::Tensor expected_reduce(const std::vector<at::Tensor>& xs, ReduceOp op) {
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

std::vector<at::Tensor> all_ranks(int n, int64_t numel, at::ScalarType dtype, int salt = 0) {
  std::vector<at::Tensor> xs;
  for (int r = 0; r < n; ++r) xs.push_back(data(r, numel, dtype, salt));
  return xs;
}

std::string label(const std::string& mode, at::ScalarType dtype, ReduceOp op) {
  return mode + " " + c10::toString(dtype) + " " + reduce_op_name(op);
}

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

// The last rank issues its all_reduce late. In fused mode the others' issuing call returns
// at once, with the Work not done until the peer arrives; in separate mode the call itself
// blocks until then and returns a completed Work. (Checking is_done() after wait() could not
// tell a synchronous fused mode from an asynchronous one.) Margins are wide for a loaded
// host: the peer is 500 ms late, a free issue takes microseconds.
TEST(Collectives, FusedOpsRunAsynchronously) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (const std::string mode : {"fused", "separate"}) {
    auto& comm = world(mode).comm();
    const bool late = comm->rank() == comm->size() - 1;
    comm->barrier()->wait();
    auto t = torch::ones({1 << 16});
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto start = Clock::now();
    auto w = comm->all_reduce(t);
    const double issue_s = since(start);
    const bool done_at_issue = w->is_done();
    w->wait();
    const double done_s = since(start);
    EXPECT_TRUE(w->is_done()) << mode;
    EXPECT_EQ(t[0].item<float>(), static_cast<float>(comm->size())) << mode;
    if (late) continue;
    if (mode == "fused") {
      EXPECT_LT(issue_s, 0.15) << "fused all_reduce blocked the issuing thread for " << issue_s << " s";
      EXPECT_FALSE(done_at_issue) << "fused all_reduce done at issue although a peer had not issued yet";
      EXPECT_GT(done_s, 0.25) << "wait() returned before the late peer issued";
    } else {
      EXPECT_GT(issue_s, 0.25) << "separate all_reduce returned before the late peer issued";
      EXPECT_TRUE(done_at_issue) << "separate mode returns a completed Work";
    }
  }
}

// Fused mode posts sends and receives on the issuing thread (MPI_Isend / MPI_Irecv on mpi, an
// unbound buffer's send / recv on gloo), beside the progress thread's queue: a transfer completes while a collective
// issued before it on the same communicator still waits for a late peer. The late rank
// receives first and issues its all_reduce 500 ms later; queued behind that all_reduce, its
// partner's send could not start before then (the two queues would wait on each other).
TEST(Collectives, FusedPointToPointIsPostedBesideTheQueue) {
  using Clock = std::chrono::steady_clock;
  auto& comm = world("fused").comm();
  const int n = comm->size(), me = comm->rank();
  const bool late = me == n - 1, sender = me % 2 == 0;
  const int partner = sender ? me + 1 : me - 1;
  std::mutex mu;
  std::map<std::string, std::thread::id> ran_on;
  set_collective_observer([&](const OpInfo& info) {
    std::lock_guard<std::mutex> lock(mu);
    ran_on[info.op] = std::this_thread::get_id();
  });
  comm->barrier()->wait();
  auto t = torch::ones({1 << 10});
  auto x = data(me, 100000, at::kFloat), got = torch::empty_like(x);
  const auto start = Clock::now();
  WorkPtr reduce;
  if (!late) reduce = comm->all_reduce(t);
  WorkPtr p2p = sender ? comm->send(x, partner, 7) : comm->recv(got, partner, 7);
  p2p->wait();  // under the old queue: the watchdog ends the job after train_timeout_seconds
  const double p2p_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(p2p_s, 0.25) << "the point-to-point op waited behind the all_reduce for " << p2p_s << " s";
  if (late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    reduce = comm->all_reduce(t);
  }
  reduce->wait();
  set_collective_observer(nullptr);
  EXPECT_EQ(t[0].item<float>(), static_cast<float>(n));
  if (!sender) EXPECT_TRUE(torch::equal(got, data(partner, 100000, at::kFloat)));
  const char* p2p_op = sender ? "send" : "recv";
  EXPECT_EQ(ran_on[p2p_op], std::this_thread::get_id()) << p2p_op << " ran on another thread";
  EXPECT_NE(ran_on["all_reduce"], std::this_thread::get_id()) << "fused all_reduce ran on the issuing thread";
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

}  // namespace
}  // namespace titan

int main(int argc, char** argv) { return titan::testing::run_multirank_main(argc, argv); }
