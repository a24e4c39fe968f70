// Unit tests for the watchdog's slots: an op past its deadline ends the process with a
// message naming op, group and ranks; ops that end in time, however many, do not.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collectives/watchdog.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

OpInfo group_g() {
  OpInfo who;
  who.group = "g";
  who.group_rank = 1;
  who.group_size = 4;
  who.global_rank = 5;
  return who;
}

TEST(WatchdogDeathTest, AnOpPastItsTimeoutEndsTheProcessNamingOpGroupAndRank) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        WatchSlot slot(group_g(), 0.2);
        slot.begin("all_reduce", 4096);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(kCommFailureExitCode),
      "collective timeout: all_reduce \\(4096 bytes\\) on group 'g' \\(rank 1 of 4, global "
      "rank 5\\) did not complete within 0.2 s");
}

TEST(WatchdogDeathTest, OpsThatEndInTimeAreLeftAlone) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        WatchSlot slot(group_g(), 0.2);
        for (int i = 0; i < 100000; ++i) {
          slot.begin("all_gather", i);
          slot.end();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle past the timeout
        slot.begin("all_gather", 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        slot.end();
        std::fprintf(stderr, "survived\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "survived");
}

TEST(WatchdogDeathTest, ScopesWatchInitOps) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  OpInfo info = group_g();
  info.op = "new_group";
  EXPECT_EXIT(
      {
        WatchScope watch(info, 0.2);
        std::this_thread::sleep_for(std::chrono::seconds(10));
      },
      ::testing::ExitedWithCode(kCommFailureExitCode), "new_group on group 'g'");
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
