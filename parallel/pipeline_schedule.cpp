// The named schedules' compute orders (pipeline_schedule.h). GPipe, 1F1B and Interleaved1F1B
// follow their published orders; the zero-bubble schedules come from a unit-cost list
// scheduler (pipeline_zero_bubble.cpp) that fills waits with deferred weight gradients.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/error.h"
#include "parallel/pipeline_orders.h"

namespace titan {
namespace {

struct OpName {
  PipeOp op;
  const char* text;
};
// Longest names first, so that parsing "SEND_F" is not taken for "F".
const OpName kOpNames[] = {{PipeOp::kReduceGrad, "REDUCE_GRAD"}, {PipeOp::kUnshard, "UNSHARD"},
                           {PipeOp::kReshard, "RESHARD"},        {PipeOp::kSendF, "SEND_F"},
                           {PipeOp::kRecvF, "RECV_F"},           {PipeOp::kSendB, "SEND_B"},
                           {PipeOp::kRecvB, "RECV_B"},           {PipeOp::kForward, "F"},
                           {PipeOp::kBackward, "B"},             {PipeOp::kBackwardInput, "I"},
                           {PipeOp::kBackwardWeight, "W"}};

bool has_microbatch(PipeOp op) {
  return op != PipeOp::kUnshard && op != PipeOp::kReshard && op != PipeOp::kReduceGrad;
}

}  // namespace

bool PipeAction::compute() const {
  return op == PipeOp::kForward || op == PipeOp::kBackward || op == PipeOp::kBackwardInput ||
         op == PipeOp::kBackwardWeight;
}

bool PipeAction::p2p() const {
  return op == PipeOp::kSendF || op == PipeOp::kRecvF || op == PipeOp::kSendB || op == PipeOp::kRecvB;
}

std::string PipeAction::to_string() const {
  std::string name;
  for (const auto& n : kOpNames)
    if (n.op == op) name = n.text;
  return std::to_string(stage) + name + (has_microbatch(op) ? std::to_string(microbatch) : "");
}

PipeAction parse_pipe_action(const std::string& text, const std::string& where) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  TITAN_CONFIG_CHECK(i > 0 && i < 7, where, ": pipeline action '", text,
                     "' must start with a stage number (e.g. 0F1, 1B0, 0SEND_F1, 1REDUCE_GRAD)");
  PipeAction a;
  a.stage = std::stoi(text.substr(0, i));
  for (const auto& n : kOpNames) {
    const std::string name = n.text;
    if (text.compare(i, name.size(), name) != 0) continue;
    const std::string rest = text.substr(i + name.size());
    const bool digits = !rest.empty() && rest.size() < 7 &&
                        std::all_of(rest.begin(), rest.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    a.op = n.op;
    if (has_microbatch(n.op)) {
      TITAN_CONFIG_CHECK(digits, where, ": pipeline action '", text, "' needs a micro-batch number after ", name);
      a.microbatch = std::stoi(rest);
    } else {
      TITAN_CONFIG_CHECK(rest.empty(), where, ": pipeline action '", text, "': ", name, " takes no micro-batch");
    }
    return a;
  }
  TITAN_CONFIG_FAIL(where, ": unknown pipeline action '", text,
                    "' (kinds: F B I W SEND_F RECV_F SEND_B RECV_B UNSHARD RESHARD REDUCE_GRAD)");
}

std::vector<int> PipeSchedule::stages_of(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s)
    if (stage_rank[s] == rank) out.push_back(s);
  return out;
}

bool PipeSchedule::has_p2p() const {
  for (const auto& list : ranks)
    for (const auto& a : list)
      if (a.p2p()) return true;
  return false;
}

bool PipeSchedule::split_backward() const {
  for (const auto& list : ranks)
    for (const auto& a : list)
      if (a.op == PipeOp::kBackwardInput || a.op == PipeOp::kBackwardWeight) return true;
  return false;
}

const std::vector<std::string>& pipeline_schedule_names() {
  static const std::vector<std::string> names = {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
                                                 "ZBVZeroBubble"};
  return names;
}

bool single_stage_schedule(const std::string& name) { return name == "GPipe" || name == "1F1B"; }

double unit_cost(PipeOp op) { return op == PipeOp::kBackward ? 2.0 : 1.0; }

namespace {

std::string name_list() {
  std::string s;
  for (const auto& n : pipeline_schedule_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// REDUCE_GRAD of each stage right after the stage's last backward (B or W) on its rank.
void add_reduce_grad(PipeSchedule& s) {
  for (auto& list : s.ranks) {
    std::vector<PipeAction> out;
    std::set<int> done;
    for (size_t i = list.size(); i-- > 0;) {
      const PipeAction& a = list[i];
      const bool last_grad = a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight;
      if (last_grad && done.insert(a.stage).second) out.push_back({PipeOp::kReduceGrad, a.stage, -1});
      out.push_back(a);
    }
    list.assign(out.rbegin(), out.rend());
  }
}

}  // namespace

PipeSchedule make_pipeline_schedule(const std::string& name, int p, int num_stages, int m, bool reduce_grad) {
  const auto& names = pipeline_schedule_names();
  TITAN_CONFIG_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                     "parallelism.pipeline_parallel_schedule: unknown schedule '", name, "' (known: ", name_list(),
                     "; or set pipeline_parallel_schedule_csv)");
  TITAN_CONFIG_CHECK(p >= 1 && m >= 1, "pipeline schedule ", name, ": needs >= 1 rank and >= 1 micro-batch, got ",
                     p, " ranks and ", m, " micro-batches");
  TITAN_CONFIG_CHECK(num_stages >= p && num_stages % p == 0, "pipeline schedule ", name, ": ", num_stages,
                     " stages do not divide over ", p, " pipeline ranks");
  const int v = num_stages / p;
  PipeSchedule s;
  s.name = name;
  s.num_ranks = p;
  s.num_stages = num_stages;
  s.num_microbatches = m;
  s.stage_rank.resize(num_stages);
  for (int st = 0; st < num_stages; ++st) s.stage_rank[st] = st % p;  // loop placement
  if (single_stage_schedule(name)) {
    TITAN_CONFIG_CHECK(v == 1, "pipeline schedule ", name, " runs one stage per rank, but the split gives ", num_stages,
                       " stages for ", p, " ranks (use Interleaved1F1B, or set pipeline_parallel_layers_per_stage)");
    s.ranks = name == "GPipe" ? gpipe_order(p, m) : interleaved_order(p, 1, m);
  } else if (name == "ZBVZeroBubble") {
    TITAN_CONFIG_CHECK(v == 2, "pipeline schedule ZBVZeroBubble places exactly 2 stages per rank in a V, but the split "
                       "gives ", num_stages, " stages for ", p, " ranks");
    for (int r = 0; r < p; ++r) s.stage_rank[2 * p - 1 - r] = r;
    s.ranks = zero_bubble_v_order(p, m);
  } else {
    TITAN_CONFIG_CHECK(v == 1 || (m >= p && m % p == 0), "pipeline schedule ", name, " with ", v,
                       " stages per rank needs a multiple of the ", p, " pipeline ranks as micro-batches, got ", m,
                       " (local_batch_size / pipeline_parallel_microbatch_size)");
    s.ranks = name == "Interleaved1F1B" ? interleaved_order(p, v, m) : interleaved_zero_bubble_order(p, v, m);
  }
  if (reduce_grad) add_reduce_grad(s);
  insert_p2p(s);
  validate_pipeline_schedule(s);
  return s;
}

}  // namespace titan
