#include "devices/pipeline_replay.h"

#include <algorithm>
#include <unordered_map>

#include "common/error.h"

namespace titan::devices {
namespace {

using Kind = PipeStep::Kind;

struct Message {
  double arrival = -1;  // when a compute that needs it may start; -1: not yet known
  double send_post = -1, recv_post = -1, transfer = 0, done = -1;
  // kPosted: where each side's step is (rank, index), to time it once the pair has met.
  size_t send_rank = 0, send_step = 0, recv_rank = 0, recv_step = 0;
};

struct RankState {
  size_t cursor = 0;       // next step of the list (kAsync: the compute thread's position)
  double t = 0;            // the rank's (compute) thread is free from here
  size_t comm_cursor = 0;  // kAsync: next send / receive on the communication thread
  double comm_free = 0;    // kAsync: the communication thread is free from here
  std::vector<double> passed;  // kAsync: when the compute thread passed each step
  int64_t unmet = 0;           // kPosted: its sends and receives posted whose pair has not met
  double p2p_end = 0;          // kPosted: when its last met transfer ended
};

class Replayer {
 public:
  Replayer(const std::vector<std::vector<PipeStep>>& ranks, P2PMode mode) : ranks_(ranks), mode_(mode) {
    state_.resize(ranks.size());
    result_.timing.resize(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      state_[r].passed.assign(ranks[r].size(), -1);
      result_.timing[r].resize(ranks[r].size());
      for (const PipeStep& s : ranks[r]) count(r, s);
    }
    for (const auto& [id, c] : counts_) {
      TITAN_CHECK(c.makes + c.sends == 1 || (c.makes + c.sends == 0 && c.recvs == 0), "pipeline replay: message ",
                  id, " is made by ", c.makes + c.sends, " steps");
      TITAN_CHECK(c.recvs == c.sends, "pipeline replay: message ", id, " has ", c.sends, " sends and ", c.recvs,
                  " receives");
    }
  }

  PipelineReplayResult run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t r = 0; r < ranks_.size(); ++r) progress = advance(r) || progress;
    }
    const size_t n = ranks_.size();
    result_.rank_end_s.assign(n, 0);
    result_.compute_busy_s.assign(n, 0);
    double busy = 0;
    for (size_t r = 0; r < n; ++r) {
      const RankState& s = state_[r];
      if (!finished(r)) {
        result_.deadlock = true;
        result_.stuck.push_back({static_cast<int>(r), s.cursor < ranks_[r].size() ? s.cursor : stuck_comm(r)});
      }
      result_.rank_end_s[r] = std::max({s.t, s.comm_free, s.p2p_end});
      for (const PipeStep& st : ranks_[r])
        if (st.kind == Kind::kCompute) result_.compute_busy_s[r] += st.duration_s;
      busy += result_.compute_busy_s[r];
      result_.makespan_s = std::max(result_.makespan_s, result_.rank_end_s[r]);
    }
    if (result_.makespan_s > 0 && n > 0) result_.bubble_fraction = 1.0 - busy / (n * result_.makespan_s);
    return result_;
  }

 private:
  void count(size_t r, const PipeStep& s) {
    if (s.kind == Kind::kCompute) {
      TITAN_CHECK(s.duration_s >= 0, "pipeline replay: rank ", r, " has a negative duration");
      for (auto m : s.makes) ++counts_[m].makes;
      for (auto m : s.needs) counts_[m];
      return;
    }
    TITAN_CHECK(mode_ != P2PMode::kImplicit, "pipeline replay: send/recv steps on rank ", r,
                " in implicit delivery mode");
    if (s.kind == Kind::kSend) ++counts_[s.message].sends;
    else ++counts_[s.message].recvs;
  }

  bool finished(size_t r) const {
    const RankState& s = state_[r];
    if (s.cursor < ranks_[r].size()) return false;
    if (mode_ == P2PMode::kPosted) return s.unmet == 0;
    return mode_ != P2PMode::kAsync || s.comm_cursor >= ranks_[r].size();
  }

  // An unfinished rank whose compute thread reached the end: its first send or receive that
  // never completed.
  size_t stuck_comm(size_t r) const {
    if (mode_ != P2PMode::kPosted) return state_[r].comm_cursor;
    for (size_t i = 0; i < ranks_[r].size(); ++i)
      if (ranks_[r][i].kind != Kind::kCompute && result_.timing[r][i].end_s < 0) return i;
    return ranks_[r].size();
  }

  // kPosted: posts step i of rank r at time t; times both sides once the pair has met.
  void post(size_t r, size_t i, double t) {
    const PipeStep& s = ranks_[r][i];
    Message& m = messages_[s.message];
    (s.kind == Kind::kSend ? m.send_rank : m.recv_rank) = r;
    (s.kind == Kind::kSend ? m.send_step : m.recv_step) = i;
    if (meet(s, t) < 0) {
      ++state_[r].unmet;
      return;
    }
    const size_t other = s.kind == Kind::kSend ? m.recv_rank : m.send_rank;
    --state_[other].unmet;
    result_.timing[m.send_rank][m.send_step] = {m.send_post, m.done};
    result_.timing[m.recv_rank][m.recv_step] = {m.recv_post, m.done};
    for (size_t side : {m.send_rank, m.recv_rank}) state_[side].p2p_end = std::max(state_[side].p2p_end, m.done);
  }

  // Start of a compute step, or -1 while a message it needs has not arrived.
  double ready(const PipeStep& s, double t) {
    for (auto m : s.needs) {
      const double a = messages_[m].arrival;
      if (a < 0) return -1;
      t = std::max(t, a);
    }
    return t;
  }

  // Posts this side of a send / receive at `post`; returns the pair's completion time once
  // both sides have posted, else -1.
  double meet(const PipeStep& s, double post) {
    Message& m = messages_[s.message];
    double& mine = s.kind == Kind::kSend ? m.send_post : m.recv_post;
    if (mine < 0) mine = post;
    if (s.kind == Kind::kSend) m.transfer = s.duration_s;
    if (m.done < 0 && m.send_post >= 0 && m.recv_post >= 0) {
      m.done = std::max(m.send_post, m.recv_post) + m.transfer;
      m.arrival = m.done;
    }
    return m.done;
  }

  bool advance(size_t r) {
    RankState& st = state_[r];
    const auto& steps = ranks_[r];
    bool moved = false;
    for (;;) {
      bool step_moved = false;
      if (st.cursor < steps.size()) {
        const PipeStep& s = steps[st.cursor];
        PipeTiming& tm = result_.timing[r][st.cursor];
        if (s.kind == Kind::kCompute) {
          const double start = ready(s, st.t);
          if (start >= 0) {
            tm = {start, start + s.duration_s};
            st.t = tm.end_s;
            for (auto m : s.makes) messages_[m].arrival = tm.end_s;
            step_moved = true;
          }
        } else if (mode_ == P2PMode::kAsync) {
          st.passed[st.cursor] = st.t;  // handed to the communication thread
          step_moved = true;
        } else if (mode_ == P2PMode::kPosted) {
          post(r, st.cursor, st.t);
          step_moved = true;
        } else {
          const double done = meet(s, st.t);
          if (done >= 0) {
            const Message& m = messages_[s.message];
            tm = {s.kind == Kind::kSend ? m.send_post : m.recv_post, done};
            st.t = done;
            step_moved = true;
          }
        }
        if (step_moved) ++st.cursor;
      }
      if (mode_ == P2PMode::kAsync) step_moved = advance_comm(r) || step_moved;
      if (!step_moved) return moved;
      moved = true;
    }
  }

  // kAsync: runs the communication thread of rank r as far as it can.
  bool advance_comm(size_t r) {
    RankState& st = state_[r];
    const auto& steps = ranks_[r];
    bool moved = false;
    for (;;) {
      while (st.comm_cursor < steps.size() && steps[st.comm_cursor].kind == Kind::kCompute) ++st.comm_cursor;
      if (st.comm_cursor >= steps.size() || st.passed[st.comm_cursor] < 0) return moved;
      const PipeStep& s = steps[st.comm_cursor];
      const double post = std::max(st.passed[st.comm_cursor], st.comm_free);
      const double done = meet(s, post);
      if (done < 0) return moved;
      result_.timing[r][st.comm_cursor] = {post, done};
      st.comm_free = done;
      ++st.comm_cursor;
      moved = true;
    }
  }

  const std::vector<std::vector<PipeStep>>& ranks_;
  P2PMode mode_;
  std::vector<RankState> state_;
  std::unordered_map<int64_t, Message> messages_;
  struct Counts {
    int makes = 0, sends = 0, recvs = 0;
  };
  std::unordered_map<int64_t, Counts> counts_;
  PipelineReplayResult result_;
};

}  // namespace

PipelineReplayResult replay_pipeline(const std::vector<std::vector<PipeStep>>& ranks, P2PMode mode) {
  return Replayer(ranks, mode).run();
}

}  // namespace titan::devices
