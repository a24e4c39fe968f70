// Probe choice (see shard_resize.h): the degree a layout is recorded at, what FSDP notes
// while it is, and the probe made from them.
#include "trainer/simulate/shard_resize.h"

#include <algorithm>
#include <stdexcept>

#include "common/error.h"
#include "parallel/fsdp_observer.h"
#include "trainer/simulate/shard_buckets.h"
#include "trainer/simulate/shard_plan.h"
#include "trainer/simulate/shard_sizes.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/trainer.h"

namespace titan {

namespace {

// A probe degree at which some shard size equals another size of the step: thrown from the
// FSDP plan's construction, before anything is recorded, so the next degree is tried at once.
struct ProbeRejected : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class NoteTaker : public FsdpObserver {
 public:
  // probe_degree 0: notes only, no probe degree's checks (record_noted).
  NoteTaker(ShardNotes* notes, int64_t probe_degree) : n_(notes), w_(probe_degree) { set_fsdp_observer(this); }
  ~NoteTaker() override { set_fsdp_observer(nullptr); }
  NoteTaker(const NoteTaker&) = delete;
  NoteTaker& operator=(const NoteTaker&) = delete;

  void plan(int64_t degree, const std::vector<int64_t>& numels) override {
    std::string why;
    if (w_ > 0 && degree != w_)
      throw ProbeRejected("an FSDP plan over " + std::to_string(degree) + " ranks at probe degree " +
                          std::to_string(w_));
    for (int64_t n : numels)
      if (w_ > 0 && !distinguishable(n, degree, &why)) throw ProbeRejected(why);
    n_->ranks.emplace_back();
    n_->ranks.back().degree = degree;
    n_->ranks.back().numels = numels;
  }
  void shard_sized(const torch::Tensor& t, int64_t numel) override {
    const int64_t id = recorded_storage_id(t);
    if (id == 0) return;  // not in the recording: nothing of it to resize
    if (n_->ranks.empty()) return fail("a shard-sized tensor before any FSDP plan");
    auto [it, added] = n_->ranks.back().seeds.emplace(id, numel);
    if (!added && it->second != numel) fail("one storage sized by two parameters");
  }
  void collective(const std::string& op, const std::string& group, const std::vector<int64_t>& numels,
                  const std::vector<at::ScalarType>& dtypes, bool padded) override {
    if (n_->ranks.empty()) return fail("an FSDP collective before any FSDP plan");
    ShardCall c;
    c.kind = devices::parse_collective(op);
    c.group = placement_group(group);
    c.numels = numels;
    c.dtypes = dtypes;
    for (auto d : dtypes) c.elem.push_back(static_cast<int64_t>(c10::elementSize(d)));
    c.padded = padded;
    c.position = recorded_issue_count();
    if (c.position < 0) return fail("an FSDP collective outside a recording");
    n_->ranks.back().calls.push_back(std::move(c));
  }
  void unsupported(const std::string& why) override { fail(why); }

 private:
  void fail(const std::string& why) {
    if (n_->conflict.empty()) n_->conflict = why;
  }
  ShardNotes* n_;
  int64_t w_;
};

// The step and notes as a probe holds them: its Communicator calls dropped (the probe
// degree's are no other degree's, and copying them into every resized step costs).
ProbeRecording noted_probe(RecordedStep step, int64_t degree, ShardNotes notes, const JobConfig& cfg) {
  const size_t ranks = step.pipeline ? step.pipeline->ranks.size() : 1;
  TITAN_CHECK(notes.conflict.empty(), "shard resizing: ", notes.conflict);
  TITAN_CHECK(notes.ranks.size() == ranks, "shard resizing: ", notes.ranks.size(), " FSDP plans for ", ranks, " ranks");
  step.calls.clear();
  if (step.pipeline)
    for (auto& c : step.pipeline->calls) c.clear();
  return make_probe(std::move(step), degree, std::move(notes), cfg);
}

}  // namespace

bool shard_resizable(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  // A fixed global batch makes the number of micro-batches follow the data-parallel degree.
  return d.dp_shard >= 2 && d.cp == 1 && cfg.training.global_batch_size <= 0;
}

JobConfig with_shard_degree(const JobConfig& cfg, int64_t w) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  JobConfig c = cfg;
  auto& p = c.parallelism;
  p.data_parallel_replicate_degree = d.dp_replicate;
  p.data_parallel_shard_degree = w;
  p.tensor_parallel_degree = d.tp;
  p.pipeline_parallel_degree = d.pp;
  p.context_parallel_degree = d.cp;
  c.simulation.num_chips = d.dp_replicate * w * d.tp * d.pp * d.cp;
  return c;
}

ProbeRecording make_probe(RecordedStep step, int64_t degree, ShardNotes notes, const JobConfig& cfg) {
  ProbeRecording out;
  out.step = std::move(step);
  // The probe's events are final: each trace is named, and a step resized from it keeps the
  // names of the traces resizing leaves as they are (replays of them are then remembered
  // across degrees, devices/replay_memo.h), and every trace's ops name (their lowerings
  // are remembered, devices/lowering_memo.h).
  const size_t ranks = out.step.pipeline ? out.step.pipeline->ranks.size() : 1;
  for (size_t q = 0; q < ranks; ++q)
    for (devices::Trace* t : rank_traces(out.step, q)) {
      t->set_content_id(devices::Trace::new_content_id());
      t->set_ops_id(t->content_id());
    }
  out.degree = degree;
  out.plan = std::make_shared<ShardPlan>();
  out.plan->notes = std::move(notes);
  out.plan->degree = degree;
  out.plan->fused = cfg.comm.collective_mode == CollectiveMode::kFused;
  out.plan->cap = cap_bytes(cfg);
  return out;
}

const ShardNotes& probe_notes(const ProbeRecording& probe) { return probe.plan->notes; }

ProbeRecording record_probe(const JobConfig& cfg, int64_t first_degree) {
  TITAN_CHECK(shard_resizable(cfg), "record_probe: the layout has no dp_shard degree to resize");
  std::vector<int64_t> degrees = {3, 5, 7, 11, 13, 17, 19, 23, 29, 31};
  auto hint = std::find(degrees.begin(), degrees.end(), first_degree);
  if (hint != degrees.end()) std::rotate(degrees.begin(), hint, hint + 1);
  std::string why;
  for (int64_t w : degrees) {
    JobConfig p = with_shard_degree(cfg, w);
    ShardNotes notes;
    ProbeRecording out;
    try {
      NoteTaker taker(&notes, w);
      out.step = record_step(p, /*place=*/false);  // probe chip counts need not place
    } catch (const ProbeRejected& e) {
      why = e.what();
      continue;
    }
    return noted_probe(std::move(out.step), w, std::move(notes), cfg);
  }
  TITAN_FAIL("shard resizing: no probe degree tells every shard size apart (", why, ")");
}

ProbeRecording record_noted(const JobConfig& cfg) {
  ShardNotes notes;
  RecordedStep step;
  {
    NoteTaker taker(&notes, 0);
    step = record_step(cfg, /*place=*/false);
  }
  return noted_probe(std::move(step), parallel_dims(cfg, cfg.simulation.num_chips).dp_shard, std::move(notes), cfg);
}

}  // namespace titan
