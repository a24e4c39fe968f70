// Zero-bubble compute orders (pipeline_orders.h): a unit-cost list scheduler over the
// split backward (F, I, W all cost 1), in the spirit of Qi et al. 2024, "Zero Bubble
// Pipeline Parallelism": input gradients stay on the critical path, weight gradients wait
// and fill the time a rank would otherwise spend waiting.
#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <optional>

#include "common/error.h"
#include "parallel/pipeline_orders.h"

namespace titan {
namespace {

class ListScheduler {
 public:
  ListScheduler(int p, int m, std::vector<int> stage_rank)
      : p_(p), m_(m), stages_(static_cast<int>(stage_rank.size())), stage_rank_(std::move(stage_rank)) {
    f_end_.assign(stages_, std::vector<double>(m, -1));
    i_end_ = f_end_;
    next_f_.assign(stages_, 0);
    next_i_.assign(stages_, 0);
    free_.assign(p, 0);
    in_flight_.assign(p, 0);
    pending_w_.resize(p);
    out_.resize(p);
  }

  struct Decision {
    std::optional<PipeAction> action;
    double wait_until = -1;  // no action: re-decide at this time (-1: when anything changes)
  };
  using Policy = std::function<Decision(int rank)>;

  PipeOrder run(const Policy& policy) {
    const size_t total = static_cast<size_t>(stages_) * m_ * 3;
    size_t done = 0;
    std::vector<bool> stalled(p_, false);
    while (done < total) {
      int r = -1;
      for (int q = 0; q < p_; ++q) {
        if (stalled[q] || finished(q)) continue;
        if (r < 0 || free_[q] < free_[r]) r = q;
      }
      TITAN_CHECK(r >= 0, "pipeline list scheduler: no rank can proceed (", done, " of ", total, " actions placed)");
      Decision d = policy(r);
      if (d.action) {
        place(r, *d.action);
        ++done;
        std::fill(stalled.begin(), stalled.end(), false);
      } else if (d.wait_until > free_[r]) {
        free_[r] = d.wait_until;
      } else {
        stalled[r] = true;
      }
    }
    return out_;
  }

  // When action a's inputs are all there, -1 while one is still unknown (it arrives after
  // free_[r] of the rank that asks: ranks are visited in time order).
  double arrival(const PipeAction& a) const {
    const int s = a.stage, k = a.microbatch;
    if (a.op == PipeOp::kForward) return s == 0 ? 0.0 : f_end_[s - 1][k];
    const double own = f_end_[s][k];
    if (own < 0) return -1;
    const double grad = s == stages_ - 1 ? own : i_end_[s + 1][k];
    return grad < 0 ? -1 : std::max(own, grad);
  }

  // The next F (or I) of stage s, when the stage still has one.
  std::optional<PipeAction> next(PipeOp op, int s) const {
    const int k = op == PipeOp::kForward ? next_f_[s] : next_i_[s];
    if (k >= m_) return std::nullopt;
    return PipeAction{op, s, k};
  }
  bool ready_now(const std::optional<PipeAction>& a, int r) const {
    if (!a) return false;
    const double t = arrival(*a);
    return t >= 0 && t <= free_[r];
  }
  // The earliest time something may change for rank r: a known later arrival of one of
  // `candidates`, or another rank finishing its current action.
  double next_event(int r, const std::vector<std::optional<PipeAction>>& candidates) const {
    double t = std::numeric_limits<double>::infinity();
    for (const auto& c : candidates) {
      const double a = c ? arrival(*c) : -1;
      if (a > free_[r]) t = std::min(t, a);
    }
    for (int q = 0; q < p_; ++q)
      if (q != r && !finished(q) && free_[q] > free_[r]) t = std::min(t, free_[q]);
    return std::isinf(t) ? -1 : t;
  }

  size_t pending_w(int r) const { return pending_w_[r].size(); }
  PipeAction oldest_w(int r) const { return pending_w_[r].front(); }
  int in_flight(int r) const { return in_flight_[r]; }
  bool only_w_left(int r) const {
    for (int s = 0; s < stages_; ++s)
      if (stage_rank_[s] == r && (next_f_[s] < m_ || next_i_[s] < m_)) return false;
    return true;
  }

 private:
  bool finished(int r) const { return only_w_left(r) && pending_w_[r].empty(); }

  void place(int r, const PipeAction& a) {
    const double start = a.op == PipeOp::kBackwardWeight ? free_[r] : std::max(free_[r], arrival(a));
    free_[r] = start + 1;
    if (a.op == PipeOp::kForward) {
      f_end_[a.stage][a.microbatch] = free_[r];
      ++next_f_[a.stage];
      ++in_flight_[r];
    } else if (a.op == PipeOp::kBackwardInput) {
      i_end_[a.stage][a.microbatch] = free_[r];
      ++next_i_[a.stage];
      pending_w_[r].push_back({PipeOp::kBackwardWeight, a.stage, a.microbatch});
    } else {
      TITAN_CHECK(!pending_w_[r].empty() && pending_w_[r].front() == a, "pipeline list scheduler: W out of order");
      pending_w_[r].pop_front();
      --in_flight_[r];
    }
    out_[r].push_back(a);
  }

  int p_, m_, stages_;
  std::vector<int> stage_rank_;
  std::vector<std::vector<double>> f_end_, i_end_;
  std::vector<int> next_f_, next_i_;
  std::vector<double> free_;
  std::vector<int> in_flight_;
  std::vector<std::deque<PipeAction>> pending_w_;
  PipeOrder out_;
};

ListScheduler::Decision do_action(const PipeAction& a) { return {a, -1}; }

}  // namespace

PipeOrder interleaved_zero_bubble_order(int p, int v, int m) {
  // The F / I order is interleaved 1F1B's with B read as I.
  PipeOrder plan = interleaved_order(p, v, m);
  for (auto& list : plan)
    for (auto& a : list)
      if (a.op == PipeOp::kBackward) a.op = PipeOp::kBackwardInput;
  std::vector<int> stage_rank(p * v);
  for (int s = 0; s < p * v; ++s) stage_rank[s] = s % p;
  ListScheduler ls(p, m, stage_rank);
  std::vector<size_t> pos(p, 0);
  return ls.run([&](int r) -> ListScheduler::Decision {
    const size_t lag = static_cast<size_t>(p - 1 - r);
    if (ls.pending_w(r) > lag || (pos[r] == plan[r].size() && ls.pending_w(r) > 0)) return do_action(ls.oldest_w(r));
    if (pos[r] == plan[r].size()) return {};
    std::optional<PipeAction> next = plan[r][pos[r]];
    if (ls.ready_now(next, r)) return do_action(plan[r][pos[r]++]);
    if (ls.pending_w(r) > 0) return do_action(ls.oldest_w(r));
    return {std::nullopt, ls.next_event(r, {next})};
  });
}

PipeOrder zero_bubble_v_order(int p, int m) {
  std::vector<int> stage_rank(2 * p);
  for (int r = 0; r < p; ++r) stage_rank[r] = stage_rank[2 * p - 1 - r] = r;
  ListScheduler ls(p, m, stage_rank);
  return ls.run([&](int r) -> ListScheduler::Decision {
    const int down = r, up = 2 * p - 1 - r;  // the rank's stage on each leg of the V
    const size_t lag = static_cast<size_t>(p - 1 - r);
    if (ls.pending_w(r) > lag || (ls.only_w_left(r) && ls.pending_w(r) > 0)) return do_action(ls.oldest_w(r));
    auto i_up = ls.next(PipeOp::kBackwardInput, up), i_down = ls.next(PipeOp::kBackwardInput, down);
    auto f_up = ls.next(PipeOp::kForward, up), f_down = ls.next(PipeOp::kForward, down);
    // Input gradients first (the older micro-batch, the up leg on a tie), then forwards on
    // the up leg, then new micro-batches while the rank's stage activations stay under 2p.
    std::optional<PipeAction> pick;
    const bool up_ready = ls.ready_now(i_up, r), down_ready = ls.ready_now(i_down, r);
    if (up_ready && (!down_ready || i_up->microbatch <= i_down->microbatch)) pick = i_up;
    else if (down_ready) pick = i_down;
    else if (ls.ready_now(f_up, r)) pick = f_up;
    else if (ls.ready_now(f_down, r) && ls.in_flight(r) < 2 * p) pick = f_down;
    if (pick) return do_action(*pick);
    if (ls.pending_w(r) > 0) return do_action(ls.oldest_w(r));
    return {std::nullopt, ls.next_event(r, {i_up, i_down, f_up, f_down})};
  });
}

}  // namespace titan
