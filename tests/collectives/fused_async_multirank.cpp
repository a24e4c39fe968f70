// Multi-rank tests that fused collective mode runs asynchronously: an issuing call returns
// before a late peer arrives (separate mode blocks), and point-to-point ops are posted on
// the issuing thread beside the progress thread's queue. Part of the collectives_multirank
// binary (mpi_tests.cmake).
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "tests/collectives/multirank_data.h"
#include "tests/collectives/multirank_main.h"

namespace titan {
namespace {

using titan::testing::world;

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

}  // namespace
}  // namespace titan
