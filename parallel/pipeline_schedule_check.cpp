// Schedules as replay steps, send/receive insertion, validation and the text timeline
// (pipeline_schedule.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "parallel/pipeline_schedule.h"

namespace titan {
namespace {

using devices::P2PMode;
using devices::PipeStep;

// Message ids: the activation a stage sends on, the gradient it sends back, and two
// same-rank tokens (a stage's F done, its I done) that order F -> B/I -> W.
enum Channel { kActivation = 0, kGradient = 1, kForwardDone = 2, kInputGradDone = 3 };
int64_t message_id(const PipeSchedule& s, Channel c, int stage, int mb) {
  return (static_cast<int64_t>(c) * s.num_stages + stage) * s.num_microbatches + mb;
}

bool is_backward(PipeOp op) { return op == PipeOp::kBackward || op == PipeOp::kBackwardInput; }

std::string where(const PipeSchedule& s, int rank) {
  return "pipeline schedule '" + s.name + "', rank " + std::to_string(rank);
}

}  // namespace

std::vector<std::vector<PipeStep>> pipeline_steps(const PipeSchedule& s, P2PMode mode,
                                                  const std::function<double(const PipeAction&)>& cost,
                                                  const std::function<double(const PipeAction&)>& transfer) {
  const int last = s.num_stages - 1;
  auto local = [&](int a, int b) { return mode == P2PMode::kImplicit || s.stage_rank[a] == s.stage_rank[b]; };
  std::vector<std::vector<PipeStep>> out(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    for (const PipeAction& a : s.ranks[r]) {
      PipeStep st;
      const int g = a.stage, k = a.microbatch;
      if (a.p2p() && mode != P2PMode::kImplicit) {
        const bool send = a.op == PipeOp::kSendF || a.op == PipeOp::kSendB;
        st.kind = send ? PipeStep::Kind::kSend : PipeStep::Kind::kRecv;
        if (a.op == PipeOp::kSendF) st.message = message_id(s, kActivation, g, k);
        if (a.op == PipeOp::kRecvF) st.message = message_id(s, kActivation, g - 1, k);
        if (a.op == PipeOp::kSendB) st.message = message_id(s, kGradient, g, k);
        if (a.op == PipeOp::kRecvB) st.message = message_id(s, kGradient, g + 1, k);
        if (send) st.duration_s = transfer(a);
      } else if (a.compute()) {
        st.duration_s = cost(a);
        if (a.op == PipeOp::kForward) {
          if (g > 0) st.needs.push_back(message_id(s, kActivation, g - 1, k));
          st.makes.push_back(message_id(s, kForwardDone, g, k));
          if (g < last && local(g, g + 1)) st.makes.push_back(message_id(s, kActivation, g, k));
        } else if (is_backward(a.op)) {
          st.needs.push_back(message_id(s, kForwardDone, g, k));
          if (g < last) st.needs.push_back(message_id(s, kGradient, g + 1, k));
          if (a.op == PipeOp::kBackwardInput) st.makes.push_back(message_id(s, kInputGradDone, g, k));
          if (g > 0 && local(g, g - 1)) st.makes.push_back(message_id(s, kGradient, g, k));
        } else {
          st.needs.push_back(message_id(s, kInputGradDone, g, k));
        }
      }
      out[r].push_back(std::move(st));  // FSDP actions (and implicit p2p): zero-cost steps
    }
  }
  return out;
}

namespace {

double compute_unit_cost(const PipeAction& a) { return a.compute() ? unit_cost(a.op) : 0.0; }
double free_transfer(const PipeAction&) { return 0.0; }

std::string deadlock_text(const PipeSchedule& s, const devices::PipelineReplayResult& r) {
  std::ostringstream os;
  for (const auto& [rank, idx] : r.stuck) {
    os << (os.tellp() > 0 ? "; " : "") << "rank " << rank << " waits at "
       << s.ranks[rank][idx].to_string() << " (action " << idx << ")";
  }
  return os.str();
}

}  // namespace

void insert_p2p(PipeSchedule& s) {
  TITAN_CHECK(!s.has_p2p(), "insert_p2p: schedule '", s.name, "' already has sends and receives");
  const auto steps = pipeline_steps(s, P2PMode::kImplicit, compute_unit_cost, free_transfer);
  const auto replay = devices::replay_pipeline(steps, P2PMode::kImplicit);
  TITAN_CONFIG_CHECK(!replay.deadlock, "pipeline schedule '", s.name,
                     "' deadlocks: its compute order waits in a cycle (", deadlock_text(s, replay), ")");
  // Every cross-rank tensor, keyed by (time made, sender, receiver, channel, stage, micro-batch):
  // both sides handle their sends and receives in this one global order.
  using Key = std::tuple<double, int, int, int, int, int>;
  std::vector<std::vector<std::pair<Key, PipeAction>>> comm(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PipeAction& a = s.ranks[r][i];
      const double t = replay.timing[r][i].end_s;
      const int g = a.stage, k = a.microbatch;
      if (a.op == PipeOp::kForward && g + 1 < s.num_stages && s.stage_rank[g + 1] != static_cast<int>(r)) {
        const int dst = s.stage_rank[g + 1];
        const Key key{t, static_cast<int>(r), dst, 0, g, k};
        comm[r].push_back({key, {PipeOp::kSendF, g, k}});
        comm[dst].push_back({key, {PipeOp::kRecvF, g + 1, k}});
      }
      if (is_backward(a.op) && g > 0 && s.stage_rank[g - 1] != static_cast<int>(r)) {
        const int dst = s.stage_rank[g - 1];
        const Key key{t, static_cast<int>(r), dst, 1, g, k};
        comm[r].push_back({key, {PipeOp::kSendB, g, k}});
        comm[dst].push_back({key, {PipeOp::kRecvB, g - 1, k}});
      }
    }
  }
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    auto& c = comm[r];
    std::sort(c.begin(), c.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<PipeAction> merged;
    size_t j = 0;
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      // A tensor made at time t is handled before the first action starting at or after t:
      // after the action that made it (which ends at t), before any that uses it.
      while (j < c.size() && std::get<0>(c[j].first) <= replay.timing[r][i].start_s) merged.push_back(c[j++].second);
      merged.push_back(s.ranks[r][i]);
    }
    while (j < c.size()) merged.push_back(c[j++].second);
    s.ranks[r] = std::move(merged);
  }
}

namespace {

// Positions of each action on its rank, for the order checks.
using Positions = std::map<std::tuple<int, int, int>, std::vector<size_t>>;  // (op, stage, mb)

size_t position(const PipeSchedule& s, const Positions& pos, PipeOp op, int stage, int mb, const char* what) {
  auto it = pos.find({static_cast<int>(op), stage, mb});
  const int rank = s.stage_rank[stage];
  TITAN_CONFIG_CHECK(it != pos.end(), where(s, rank), ": ", PipeAction{op, stage, mb}.to_string(), " (", what,
                     ") is missing");
  TITAN_CONFIG_CHECK(it->second.size() == 1, where(s, rank), ": ", PipeAction{op, stage, mb}.to_string(),
                     " appears ", it->second.size(), " times");
  return it->second.front();
}

void check_before(const PipeSchedule& s, size_t a, size_t b, const PipeAction& first, const PipeAction& then) {
  TITAN_CONFIG_CHECK(a < b, where(s, s.stage_rank[then.stage]), ": ", first.to_string(), " must come before ",
                     then.to_string());
}

}  // namespace

void validate_pipeline_schedule(const PipeSchedule& s, bool compute_only) {
  const int S = s.num_stages, M = s.num_microbatches;
  TITAN_CONFIG_CHECK(static_cast<int>(s.ranks.size()) == s.num_ranks && static_cast<int>(s.stage_rank.size()) == S,
                     "pipeline schedule '", s.name, "': ", s.ranks.size(), " action lists for ", s.num_ranks, " ranks");
  std::vector<Positions> pos(s.num_ranks);
  std::map<int, bool> split;  // stage -> uses I/W
  for (int r = 0; r < s.num_ranks; ++r) {
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PipeAction& a = s.ranks[r][i];
      TITAN_CONFIG_CHECK(a.stage >= 0 && a.stage < S, where(s, r), ": ", a.to_string(), " names stage ", a.stage,
                         ", but there are ", S);
      TITAN_CONFIG_CHECK(s.stage_rank[a.stage] == r, where(s, r), ": ", a.to_string(), " runs on rank ", r,
                         ", but stage ", a.stage, " is on rank ", s.stage_rank[a.stage]);
      TITAN_CONFIG_CHECK(a.microbatch < M, where(s, r), ": ", a.to_string(), " names micro-batch ", a.microbatch,
                         ", but there are ", M);
      pos[r][{static_cast<int>(a.op), a.stage, a.microbatch}].push_back(i);
      if (a.op == PipeOp::kBackwardInput || a.op == PipeOp::kBackwardWeight) split[a.stage] = true;
    }
  }
  for (int g = 0; g < S; ++g) {
    const Positions& p = pos[s.stage_rank[g]];
    const bool zb = split.count(g) > 0;
    size_t last_grad = 0;
    for (int k = 0; k < M; ++k) {
      const PipeAction f{PipeOp::kForward, g, k}, b{zb ? PipeOp::kBackwardInput : PipeOp::kBackward, g, k};
      const size_t pf = position(s, p, f.op, g, k, "forward"), pb = position(s, p, b.op, g, k, "backward");
      check_before(s, pf, pb, f, b);
      TITAN_CONFIG_CHECK(!p.count({static_cast<int>(zb ? PipeOp::kBackward : PipeOp::kBackwardInput), g, k}),
                         where(s, s.stage_rank[g]), ": stage ", g, " mixes B with I/W for micro-batch ", k);
      last_grad = std::max(last_grad, pb);
      if (zb) {
        const PipeAction w{PipeOp::kBackwardWeight, g, k};
        const size_t pw = position(s, p, w.op, g, k, "weight gradient");
        check_before(s, pb, pw, b, w);
        last_grad = std::max(last_grad, pw);
      }
      // Neighbouring stages: same rank, order; other ranks, a send before its receive's use.
      if (g + 1 < S && s.stage_rank[g + 1] == s.stage_rank[g]) {
        check_before(s, pf, position(s, p, PipeOp::kForward, g + 1, k, "forward"), f, {PipeOp::kForward, g + 1, k});
        check_before(s, position(s, p, b.op, g + 1, k, "backward"), pb, {b.op, g + 1, k}, b);
      } else if (g + 1 < S && !compute_only) {
        const Positions& q = pos[s.stage_rank[g + 1]];
        const PipeAction send{PipeOp::kSendF, g, k}, recv{PipeOp::kRecvF, g + 1, k};
        check_before(s, pf, position(s, p, send.op, g, k, "activation send"), f, send);
        const PipeAction next_f{PipeOp::kForward, g + 1, k};
        check_before(s, position(s, q, recv.op, g + 1, k, "activation receive"),
                     position(s, q, PipeOp::kForward, g + 1, k, "forward"), recv, next_f);
        const PipeAction gsend{PipeOp::kSendB, g + 1, k}, grecv{PipeOp::kRecvB, g, k};
        const bool next_zb = split.count(g + 1) > 0;
        const PipeAction next_b{next_zb ? PipeOp::kBackwardInput : PipeOp::kBackward, g + 1, k};
        check_before(s, position(s, q, next_b.op, g + 1, k, "backward"),
                     position(s, q, gsend.op, g + 1, k, "gradient send"), next_b, gsend);
        check_before(s, position(s, p, grecv.op, g, k, "gradient receive"), pb, grecv, b);
      }
    }
    auto it = p.find({static_cast<int>(PipeOp::kReduceGrad), g, -1});
    if (it != p.end()) {
      TITAN_CONFIG_CHECK(it->second.size() == 1 && it->second[0] > last_grad, where(s, s.stage_rank[g]),
                         ": ", g, "REDUCE_GRAD must come once, after the stage's last backward");
    }
    TITAN_CONFIG_CHECK(!p.count({static_cast<int>(PipeOp::kUnshard), g, -1}) &&
                           !p.count({static_cast<int>(PipeOp::kReshard), g, -1}),
                       where(s, s.stage_rank[g]), ": UNSHARD / RESHARD are not supported by the runtime (FSDP gathers "
                       "per block inside each stage action); leave them out");
  }
  // Every send / receive must belong to a neighbouring pair on different ranks (the loop
  // above found the ones that should exist); anything else is an error.
  for (int r = 0; r < s.num_ranks; ++r) {
    for (const PipeAction& a : s.ranks[r]) {
      if (!a.p2p()) continue;
      const int peer = a.op == PipeOp::kSendF || a.op == PipeOp::kRecvB ? a.stage + 1 : a.stage - 1;
      TITAN_CONFIG_CHECK(peer >= 0 && peer < S && s.stage_rank[peer] != r, where(s, r), ": ", a.to_string(),
                         " has no peer stage on another rank");
    }
  }
  if (compute_only) return;
  const auto steps = pipeline_steps(s, P2PMode::kBlocking, compute_unit_cost, free_transfer);
  const auto replay = devices::replay_pipeline(steps, P2PMode::kBlocking);
  TITAN_CONFIG_CHECK(!replay.deadlock, "pipeline schedule '", s.name,
                     "' deadlocks when sends and receives block until their peer meets them: ",
                     deadlock_text(s, replay));
}

std::vector<int> peak_in_flight(const PipeSchedule& s) {
  std::vector<int> out(s.ranks.size(), 0);
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    int held = 0;
    for (const PipeAction& a : s.ranks[r]) {
      if (a.op == PipeOp::kForward) out[r] = std::max(out[r], ++held);
      if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --held;
    }
  }
  return out;
}

std::string format_pipeline_schedule(const PipeSchedule& s) {
  const auto steps = pipeline_steps(s, P2PMode::kAsync, compute_unit_cost, free_transfer);
  const auto replay = devices::replay_pipeline(steps, P2PMode::kAsync);
  size_t width = 2;
  for (const auto& list : s.ranks)
    for (const auto& a : list) width = std::max(width, a.to_string().size());
  const int columns = static_cast<int>(std::ceil(replay.makespan_s));
  std::ostringstream os;
  os << "pipeline schedule " << s.name << ": " << s.num_ranks << " ranks, " << s.num_stages << " stages, "
     << s.num_microbatches << " micro-batches (unit costs F 1, B 2, I 1, W 1; free transfers)\n";
  for (int r = 0; r < s.num_ranks; ++r) {
    std::vector<std::string> cells(columns, ".");
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const PipeAction& a = s.ranks[r][i];
      if (!a.compute()) continue;
      const int t0 = static_cast<int>(std::lround(replay.timing[r][i].start_s));
      const int t1 = static_cast<int>(std::lround(replay.timing[r][i].end_s));
      for (int t = t0; t < t1 && t < columns; ++t) cells[t] = t == t0 ? a.to_string() : "~";
    }
    os << "rank " << r << " |";
    for (const auto& c : cells) os << " " << std::string(width - c.size(), ' ') << c;
    os << "\n";
  }
  os << "bubble fraction " << replay.bubble_fraction << ", peak micro-batches in flight per rank:";
  for (int v : peak_in_flight(s)) os << " " << v;
  os << "\n";
  for (int r = 0; r < s.num_ranks; ++r) {
    os << "rank " << r << " actions:";
    for (const auto& a : s.ranks[r]) os << " " << a.to_string();
    os << "\n";
  }
  return os.str();
}

}  // namespace titan
