// The pipeline replay: transfers cost time on the receiver's path, blocking sends hold the
// sender, asynchronous ones do not, posted ones do not wait behind each other, and a cycle is
// reported as a deadlock.
#include <gtest/gtest.h>

#include "devices/pipeline_replay.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

PipeStep compute(double d, std::vector<int64_t> needs = {}) {
  PipeStep s;
  s.duration_s = d;
  s.needs = std::move(needs);
  return s;
}
PipeStep send(int64_t m, double transfer) {
  PipeStep s;
  s.kind = PipeStep::Kind::kSend;
  s.message = m;
  s.duration_s = transfer;
  return s;
}
PipeStep recv(int64_t m) {
  PipeStep s;
  s.kind = PipeStep::Kind::kRecv;
  s.message = m;
  return s;
}

TEST(PipelineReplay, TransferDelaysTheConsumer) {
  // Rank 0 computes 1 s, sends (0.5 s); rank 1 receives and computes 2 s.
  std::vector<std::vector<PipeStep>> lists = {{compute(1), send(7, 0.5), compute(3)}, {recv(7), compute(2, {7})}};
  auto a = replay_pipeline(lists, P2PMode::kAsync);
  ASSERT_FALSE(a.deadlock);
  EXPECT_DOUBLE_EQ(a.timing[1][1].start_s, 1.5);
  EXPECT_DOUBLE_EQ(a.timing[0][2].start_s, 1.0);  // the async send does not hold rank 0
  EXPECT_DOUBLE_EQ(a.makespan_s, 4.0);
  auto p = replay_pipeline(lists, P2PMode::kPosted);
  ASSERT_FALSE(p.deadlock);
  EXPECT_DOUBLE_EQ(p.timing[1][1].start_s, 1.5);
  EXPECT_DOUBLE_EQ(p.timing[0][1].start_s, 1.0);  // posted when rank 0 reached it
  EXPECT_DOUBLE_EQ(p.timing[1][0].start_s, 0.0);  // the receive was posted at once
  EXPECT_DOUBLE_EQ(p.timing[1][0].end_s, 1.5);
  EXPECT_DOUBLE_EQ(p.makespan_s, 4.0);
  auto b = replay_pipeline(lists, P2PMode::kBlocking);
  EXPECT_DOUBLE_EQ(b.timing[0][2].start_s, 1.5);  // the blocking send does
  EXPECT_DOUBLE_EQ(b.makespan_s, 4.5);
  EXPECT_DOUBLE_EQ(b.bubble_fraction, 1.0 - 6.0 / (2 * 4.5));
}

TEST(PipelineReplay, ImplicitDeliveryAndDeadlock) {
  PipeStep make = compute(1);
  make.makes = {1};
  auto ok = replay_pipeline({{make}, {compute(1, {1})}}, P2PMode::kImplicit);
  EXPECT_FALSE(ok.deadlock);
  EXPECT_DOUBLE_EQ(ok.makespan_s, 2.0);
  // Both ranks send first; blocking sends meet no receive.
  std::vector<std::vector<PipeStep>> cross = {{send(1, 0), recv(2)}, {send(2, 0), recv(1)}};
  auto dead = replay_pipeline(cross, P2PMode::kBlocking);
  ASSERT_TRUE(dead.deadlock);
  EXPECT_EQ(dead.stuck.size(), 2u);
  // Queued on one in-order communication thread per rank, they still wait for each other.
  EXPECT_TRUE(replay_pipeline(cross, P2PMode::kAsync).deadlock);
  // Posted, every send finds its receive.
  EXPECT_FALSE(replay_pipeline(cross, P2PMode::kPosted).deadlock);
  // A cycle through compute needs deadlocks whatever the mode; posted, the stuck rank points
  // at the compute that waits.
  std::vector<std::vector<PipeStep>> wait_cycle = {{recv(1), compute(1, {1}), send(2, 0)},
                                                   {recv(2), compute(1, {2}), send(1, 0)}};
  auto posted_dead = replay_pipeline(wait_cycle, P2PMode::kPosted);
  ASSERT_TRUE(posted_dead.deadlock);
  ASSERT_EQ(posted_dead.stuck.size(), 2u);
  EXPECT_EQ(posted_dead.stuck[0].second, 1u);
}

// Rank 0 first receives what rank 1 sends only late, then sends what rank 1 needs to get
// there. Queued in order (kAsync), the send waits behind the receive, which waits for rank 1,
// which waits for the send: a deadlock. Posted, the send leaves at once: rank 1 receives it at
// 0.5, computes to 2.5, sends back (0.1), and rank 0's compute that needs it starts at 2.6.
TEST(PipelineReplay, PostedSendsDoNotWaitBehindEarlierReceives) {
  std::vector<std::vector<PipeStep>> lists = {{recv(1), send(2, 0.5), compute(1, {1})},
                                              {recv(2), compute(2, {2}), send(1, 0.1)}};
  EXPECT_TRUE(replay_pipeline(lists, P2PMode::kAsync).deadlock);
  auto p = replay_pipeline(lists, P2PMode::kPosted);
  ASSERT_FALSE(p.deadlock);
  EXPECT_DOUBLE_EQ(p.timing[0][1].end_s, 0.5);
  EXPECT_DOUBLE_EQ(p.timing[1][1].start_s, 0.5);
  EXPECT_DOUBLE_EQ(p.timing[0][0].start_s, 0.0);
  EXPECT_DOUBLE_EQ(p.timing[0][0].end_s, 2.6);
  EXPECT_DOUBLE_EQ(p.timing[0][2].start_s, 2.6);
  EXPECT_DOUBLE_EQ(p.rank_end_s[1], 2.6);  // rank 1 ends with its send, not its compute
  EXPECT_DOUBLE_EQ(p.makespan_s, 3.6);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
