// The sim backend records all_to_all_single (uneven splits, meta tensors) as one all_to_all
// issue whose bytes are what this rank sends, so the simulator can cost expert dispatch;
// fused mode records it as async, separate mode as blocking.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "collectives/sim_backend.h"
#include "collectives/world.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(SimAllToAll, UnevenSplitsOnMetaAreRecordedWithTheirBytes) {
  for (const char* mode : {"fused", "separate"}) {
    set_sim_world(4, 1);
    CommOptions o;
    o.backend = "sim";
    o.collective_mode = parse_collective_mode(mode);
    auto world = init_distributed(o);
    std::vector<SimCollectiveEvent> events;
    set_sim_listener([&](const SimCollectiveEvent& e) { events.push_back(e); });
    auto meta = torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16);
    // 10 rows of 8 sent (3 + 0 + 5 + 2), 7 received.
    auto in = torch::empty({10, 8}, meta);
    auto out = torch::empty({7, 8}, meta);
    auto work = world->comm()->all_to_all_single(out, in, {1, 0, 4, 2}, {3, 0, 5, 2});
    work->wait();
    set_sim_listener(nullptr);
    ASSERT_EQ(events.size(), 3u) << mode;  // call, issue, wait
    EXPECT_EQ(events[1].type, SimCollectiveEvent::Type::kIssue);
    EXPECT_EQ(events[1].op, "all_to_all");
    EXPECT_EQ(events[1].group_size, 4);
    EXPECT_EQ(events[1].bytes, 10 * 8 * 2);
    EXPECT_EQ(events[1].async, std::string(mode) == "fused");
    EXPECT_EQ(events[2].type, SimCollectiveEvent::Type::kWait);
    EXPECT_EQ(events[2].id, events[1].id);
  }
  set_sim_world(1, 0);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
