// The per-(site, shape) choice of one thread or all (trainer/model/kernels/thread_choice.h):
// that timing keeps the faster variant and revisits it, and that no choice changes a bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "trainer/model/kernels/thread_choice.h"
#include "trainer/model/model.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(ThreadChoice, KeepsTheFasterVariant) {
  const int before = at::get_num_threads();
  torch::set_num_threads(2);
  std::vector<int> seen;
  for (int call = 0; call < 1 + 2 * kThreadChoiceTrials + 3; ++call) {
    with_chosen_threads("test.slow_when_parallel", 1, 2, 3, [&] {
      seen.push_back(at::get_num_threads());
      if (seen.back() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  }
  EXPECT_EQ(at::get_num_threads(), 2) << "the thread count is restored after a one-thread call";
  // The untimed warm-up call, the one-thread trials and the 3 calls after the decision.
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 1 + kThreadChoiceTrials + 3);
  for (size_t i = seen.size() - 3; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "call " << i;
  // And the other way round.
  seen.clear();
  for (int call = 0; call < 1 + 2 * kThreadChoiceTrials + 3; ++call) {
    with_chosen_threads("test.slow_when_serial", 1, 2, 3, [&] {
      seen.push_back(at::get_num_threads());
      if (seen.back() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  }
  for (size_t i = seen.size() - 3; i < seen.size(); ++i) EXPECT_EQ(seen[i], 2) << "call " << i;
  torch::set_num_threads(before);
}

// A decision made under a load that then goes away is revisited: here all threads are slow
// during the trials and one thread is slow after them; the retry after
// kThreadChoiceFirstRetry calls finds all threads faster and keeps them from then on.
TEST(ThreadChoice, RetriesTheOtherVariant) {
  const int before = at::get_num_threads();
  torch::set_num_threads(2);
  const int trial_calls = 1 + 2 * kThreadChoiceTrials;
  std::vector<int> seen;
  for (int call = 0; call < trial_calls + kThreadChoiceFirstRetry + 1 + 3; ++call) {
    with_chosen_threads("test.load_moves", 1, 2, 3, [&] {
      seen.push_back(at::get_num_threads());
      const bool slow = call < trial_calls ? seen.back() > 1 : seen.back() == 1;
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    });
  }
  for (int i = trial_calls; i < trial_calls + kThreadChoiceFirstRetry; ++i) EXPECT_EQ(seen[i], 1) << "kept, call " << i;
  EXPECT_EQ(seen[trial_calls + kThreadChoiceFirstRetry], 2) << "the retry";
  for (size_t i = seen.size() - 3; i < seen.size(); ++i) EXPECT_EQ(seen[i], 2) << "switched, call " << i;
  torch::set_num_threads(before);
}

// With all threads kept, the one-thread variant is retried only once a kept call has taken
// longer than one thread's best (before that the retry cannot win, and at a large GEMM it
// costs a whole call): here all threads stay fast well past the first retry's turn, then one
// kept call is slow, and the call after it is the retry.
TEST(ThreadChoice, RetriesOneThreadOnlyWhenItCanWin) {
  const int before = at::get_num_threads();
  torch::set_num_threads(2);
  const int trial_calls = 1 + 2 * kThreadChoiceTrials, fast_calls = 3 * kThreadChoiceFirstRetry;
  std::vector<int> seen;
  for (int call = 0; call < trial_calls + fast_calls + 2; ++call) {
    with_chosen_threads("test.parallel_until_slowed", 1, 2, 3, [&] {
      seen.push_back(at::get_num_threads());
      const bool slow = seen.back() == 1 || call == trial_calls + fast_calls;
      // One thread's 20 ms: a fast call preempted on a loaded host stays below it.
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(seen.back() == 1 ? 20 : 60));
    });
  }
  for (int i = trial_calls; i <= trial_calls + fast_calls; ++i) EXPECT_EQ(seen[i], 2) << "kept, call " << i;
  EXPECT_EQ(seen.back(), 1) << "the retry after the slow call";
  torch::set_num_threads(before);
}

// A (site, shape) whose work gives other bits on one thread stays on all threads: the check
// runs the probe both ways, and a pinned site no longer follows the timing or a forced variant.
TEST(ThreadChoice, WorkWhoseBitsFollowTheThreadCountIsPinnedToAllThreads) {
  const int before = at::get_num_threads();
  torch::set_num_threads(2);
  ThreadChoiceState* s = thread_bits_check_due("test.bits_follow_threads", 1, 2, 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(thread_bits_check_due("test.bits_follow_threads", 1, 2, 3), nullptr) << "checked once per shape";
  pin_unless_same_bits(*s, [] { return torch::full({4}, static_cast<double>(at::get_num_threads())); });
  EXPECT_TRUE(s->pinned);
  EXPECT_EQ(at::get_num_threads(), 2) << "the thread count is restored after the one-thread probe";
  ThreadChoiceState* same = thread_bits_check_due("test.bits_stay", 1, 2, 3);
  ASSERT_NE(same, nullptr);
  pin_unless_same_bits(*same, [] { return torch::ones({4}); });
  EXPECT_FALSE(same->pinned);
  set_thread_choice_forced(0);
  std::vector<int> seen;
  for (int call = 0; call < 3; ++call)
    with_chosen_threads("test.bits_follow_threads", 1, 2, 3, [&] { seen.push_back(at::get_num_threads()); });
  with_chosen_threads("test.bits_stay", 1, 2, 3, [&] { seen.push_back(at::get_num_threads()); });
  set_thread_choice_forced(-1);
  EXPECT_EQ(seen, (std::vector<int>{2, 2, 2, 1}));
  torch::set_num_threads(before);
}

// Whatever each site keeps, a step's loss and gradients are the same bits as with the choice
// off: every site forced onto one thread, every site forced onto all, and no choice. The
// shapes are large enough that OpenBLAS splits the GEMMs over both threads; on a host where
// that split changes a GEMM's bits (a Zen 4 one did, at every linear of this model), the
// forced one-thread run differed from the others until GEMM sites checked their bits.
TEST(ThreadChoice, DoesNotChangeResults) {
  const int before = at::get_num_threads();
  torch::set_num_threads(2);
  ModelArgs a = model_flavor("qwen3", "debugmodel");
  a.dim = 64, a.n_layers = 1, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 16, a.ffn_dim = 160, a.vocab_size = 70;
  auto run = [&](bool choice, int forced) {
    set_thread_choice_enabled(choice);
    set_thread_choice_forced(forced);
    Transformer m(a, 64, torch::TensorOptions());
    m->init_weights(5);
    torch::manual_seed(4);
    auto tokens = torch::randint(0, a.vocab_size, {4, 64}, torch::kInt64);
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    auto loss = cross_entropy_sum(m->forward(tokens), tokens, 256.0);
    loss.backward();
    std::vector<torch::Tensor> out = {loss.detach()};
    for (auto& p : m->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto off = run(false, -1), one = run(true, 0), all = run(true, 1);
  set_thread_choice_enabled(true);
  set_thread_choice_forced(-1);
  torch::set_num_threads(before);
  ASSERT_EQ(one.size(), off.size());
  ASSERT_EQ(all.size(), off.size());
  for (size_t i = 0; i < off.size(); ++i) {
    EXPECT_TRUE(torch::equal(one[i], off[i])) << "one thread everywhere, tensor " << i;
    EXPECT_TRUE(torch::equal(all[i], off[i])) << "all threads everywhere, tensor " << i;
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
