// Simulated training (see simulate.h): record the trainer's step on the meta device over a
// `sim` World and replay it on the device model (the report: simulation_report.cpp).
#include "trainer/simulate/simulate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "collectives/world.h"
#include "common/error.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/remat_advice.h"
#include "trainer/model/model.h"
#include "common/model_args.h"
#include "trainer/components/optimizer.h"
#include "trainer/step/parallelize.h"
#include "trainer/data/tokenizer.h"
#include "trainer/simulate/extrapolated_run.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/trainer.h"

namespace titan {

std::string cpu_calibration_path() {
  if (const char* p = std::getenv("TITAN_CPU_CALIBRATION")) return p;
  return std::string(TITAN_SOURCE_DIR) + "/outputs/cpu_calibration.toml";
}

devices::ChipSpec simulated_chip(const JobConfig& cfg) {
  std::string name = cfg.simulation.device;
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "cpu") {
    const devices::CpuCalibration cal = devices::load_cpu_calibration(cpu_calibration_path());
    return devices::find_chip(name, &cal);
  }
  // Unknown names: config error listing the valid ones.
  devices::ChipSpec chip = devices::find_chip(name, nullptr, cfg.simulation.chip_file);
  if (!cfg.simulation.flash_attention) chip.fused_attention = false;
  return chip;
}

std::vector<devices::MeshDim> mesh_dims(const ParallelDims& d) {
  return {{"pp", d.pp}, {"dp_replicate", d.dp_replicate}, {"dp_shard", d.dp_shard}, {"cp", d.cp}, {"tp", d.tp}};
}

std::shared_ptr<World> sim_world(const JobConfig& cfg, int64_t chips, int64_t rank) {
  set_sim_world(chips, rank);
  CommOptions co = comm_options(cfg);
  co.backend = "sim";
  return init_distributed(co);
}

devices::ExecutionMode execution_mode(const JobConfig& cfg) {
  switch (cfg.simulation.execution) {
    case Execution::kEager: return devices::ExecutionMode::kEager;
    case Execution::kCompiled: return devices::ExecutionMode::kCompiled;
    case Execution::kDeferAndFuse: break;
  }
  return devices::ExecutionMode::kDeferAndFuse;
}

namespace {
std::atomic<bool> recording_walks_memory{true};
}  // namespace

void set_recording_walks_memory(bool walk) { recording_walks_memory = walk; }

RecordedStep record_step(const JobConfig& cfg, bool place) {
  const bool walk_memory = recording_walks_memory;
  RecordedStep out;
  out.chip = simulated_chip(cfg);
  const int64_t chips = cfg.simulation.num_chips;
  out.dims = parallel_dims(cfg, chips);  // degrees must multiply to num_chips
  // Context parallel records rank 0 of cp like any other: with the causal load balancing every
  // cp rank does the same attention work (parallel/context_parallel.h).
  if (place) out.placement = devices::place_on_device(out.chip, chips, mesh_dims(out.dims), cfg.simulation.topology);
  if (out.dims.pp > 1) {
    out.pipeline = std::make_shared<RecordedPipeline>(record_pipeline(cfg, chips, record_options(out.chip, execution_mode(cfg)), walk_memory));
    const RecordedPipeline& p = *out.pipeline;
    for (const auto& c : p.calls[0])
      if (c.type == SimCollectiveEvent::Type::kCall) out.calls.push_back(c);
    out.local_params = *std::max_element(p.local_params.begin(), p.local_params.end());
    out.param_elem_bytes = p.param_elem_bytes;
    out.microbatches = p.runs * p.schedule.num_microbatches;
    out.global_batch = ParallelDims(out.dims).dp() * cfg.training.local_batch_size * p.runs;
    return out;
  }

  // The sim World: num_chips ranks, this process is rank 0 (every rank of a stage does the
  // same work under SPMD).
  auto world = sim_world(cfg, chips, 0);

  // The trainer itself, on the meta device over the sim World: same model, plans,
  // optimizer and step as a real run.
  Trainer trainer(cfg, world, /*on_meta=*/true);
  for (auto& p : trainer.model()->named_parameters()) out.local_params += p.value().numel();
  // What the trainer stores: fp32 masters under FSDP, else mixed_precision_param.
  const std::vector<torch::Tensor> stored = trainer.model()->parameters();
  out.param_elem_bytes = static_cast<int64_t>(stored.front().element_size());
  out.global_batch = trainer.global_batch();
  out.microbatches = trainer.microbatches();
  {
    TraceRecorder recorder(record_options(out.chip, execution_mode(cfg)));
    trainer.train_step();
    recorder.finish();
    out.trace = recorder.take_trace();
    if (walk_memory) out.memory = devices::trace_memory(out.trace);
    out.calls = recorder.calls();
    out.op_counts = recorder.op_counts();
  }
  return out;
}

ReplayFigures replay_figures(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                             const devices::Placement& placement, bool keep_events, devices::ReplayMemo* memo) {
  ReplayFigures f;
  f.dims = rec.dims;
  f.local_params = rec.local_params;
  f.param_elem_bytes = rec.param_elem_bytes;
  f.microbatches = rec.microbatches;
  f.global_batch = rec.global_batch;
  devices::SimulationOptions o;
  o.execution = execution_mode(cfg);
  // Element-wise runs fused (compiled, defer_and_fuse): their temporaries take no memory.
  const bool fused = devices::execution_overheads(chip, o.execution).fuse_elementwise;
  // A compiler that schedules the whole step (XLA) places each FSDP gather and reduce-scatter
  // around the weight's own uses (devices/trace_memory.h, per_use).
  const bool per_use = devices::compiles_whole_step(chip, o.execution);
  f.memory = rec.memory.of(fused, per_use);
  o.keep_events = keep_events;
  o.collective_mode = cfg.comm.collective_mode;
  o.async_tensor_parallel = cfg.parallelism.enable_async_tensor_parallel;
  o.memo = memo;
  if (rec.pipeline) {
    const RecordedPipeline& p = *rec.pipeline;
    f.segment_costs = cost_pipeline_segments(p, placement, chip, o);
    f.pipeline_structure = rec.pipeline;
    f.options = o;
    f.options.memo = nullptr;  // the figures outlive the caller's memo
    PipelineReplayReport pr = compose_pipeline_step(p, f.segment_costs, o);
    f.report = std::move(pr.report);
    f.pipeline = true;
    f.pipeline_schedule = p.schedule.name;
    f.pipeline_stages = p.schedule.num_stages;
    f.pipeline_microbatches = p.schedule.num_microbatches;
    f.pipeline_recorded_microbatches = p.recorded_microbatches;
    f.bubble_fraction = pr.bubble_fraction;
    f.exposed_by_kind = std::move(pr.exposed_by_kind);
    f.rank_busy_s = std::move(pr.rank_busy_s);
    f.rank_local_params = p.local_params;
    // Pipeline ranks: walked unfused whatever the mode. Fused, a stage's peak can move
    // within a segment as the model deepens (a transient early in it against the activations
    // its last layer leaves), which layer extrapolation cannot extend; unfused is the upper
    // bound.
    for (const devices::StepMemory& m : p.memory) f.rank_memory.push_back(m.eager());
    f.rank_holds_output = p.holds_output;
  } else {
    o.exposed_by_kind = true;
    f.report = devices::simulate_step(rec.trace, placement, chip, o);
    f.exposed_by_kind = std::move(f.report.exposed_by_kind);
  }
  return f;
}

SimulationResult finish_replay(const JobConfig& cfg, const ReplayFigures& f, const devices::ChipSpec& chip,
                               const devices::Placement& placement) {
  SimulationResult r;
  r.report = f.report;
  r.dims = f.dims;
  r.ep = cfg.parallelism.expert_parallel_degree;
  r.etp = cfg.parallelism.expert_tensor_parallel_degree;
  r.placement = placement.describe();
  r.num_chips = cfg.simulation.num_chips;
  r.global_batch = f.global_batch;
  r.seq_len = cfg.training.seq_len;
  r.microbatches = f.microbatches;
  r.exposed_comm_by_kind = f.exposed_by_kind;
  if (f.pipeline) {
    r.pipeline_schedule = f.pipeline_schedule;
    r.pipeline_stages = f.pipeline_stages;
    r.pipeline_microbatches = f.pipeline_microbatches;
    r.pipeline_recorded_microbatches = f.pipeline_recorded_microbatches;
    r.pipeline_bubble_fraction = f.bubble_fraction;
    r.pipeline_rank_busy_s = f.rank_busy_s;
  }

  const ModelArgs args = resolve_model_args(cfg, vocab_without_data(cfg));
  r.flops_per_token = flops_per_token(args, r.seq_len);
  r.peak_flops = chip.peak_bf16_flops;
  const double tokens = static_cast<double>(r.global_batch * r.seq_len);
  r.tokens_per_s_per_chip = tokens / r.report.step_time_s / static_cast<double>(r.num_chips);
  r.tflops_per_chip = r.flops_per_token * r.tokens_per_s_per_chip / 1e12;
  r.mfu_percent = 100.0 * r.flops_per_token * r.tokens_per_s_per_chip / r.peak_flops;

  // What this trainer stores: its shards and two AdamW states in the parameter dtype
  // (zeros_like), no separate master copy; the rest of what outlives the step is gradients.
  auto chip_memory = [&](int64_t local_params, const devices::TraceMemory& m) {
    const int64_t params = local_params * f.param_elem_bytes;
    return devices::memory_of_step(m, params, 2 * params, chip);
  };
  r.memory = chip_memory(f.local_params, f.memory);
  if (f.pipeline) {
    // Each pipeline rank's own step (its stages, the micro-batches its schedule keeps in
    // flight); the largest is the report's.
    for (size_t q = 0; q < f.rank_local_params.size(); ++q) {
      const devices::MemoryReport m = chip_memory(f.rank_local_params[q], f.rank_memory[q]);
      r.pipeline_rank_memory_gib.push_back(m.total_gib());
      if (q == 0 || m.total > r.memory.total) r.memory = m;
    }
  }
  return r;
}

SimulationResult replay_step(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                             const devices::Placement& placement, bool keep_events, devices::ReplayMemo* memo) {
  return finish_replay(cfg, replay_figures(cfg, rec, chip, placement, keep_events, memo), chip, placement);
}

namespace {

SimulationResult replay(const JobConfig& cfg, const RecordedStep& rec) {
  return replay_step(cfg, rec, rec.chip, rec.placement);
}

}  // namespace

SimulationResult simulate(const JobConfig& cfg, bool other_mode, RecordedStep* recorded) {
  const auto t0 = std::chrono::steady_clock::now();
  // simulation.layer_extrapolation: from shallow recordings (none kept for a trace).
  auto run = [recorded](const JobConfig& c) {
    std::string why;
    std::optional<SimulationResult> x = recorded ? std::nullopt : simulate_by_layer_extrapolation(c, &why);
    if (x) return *x;
    SimulationResult full = replay(c, record_step(c));
    full.full_depth_reason = why;
    return full;
  };
  SimulationResult r = recorded ? [&] {
    RecordedStep rec = record_step(cfg);
    SimulationResult full = replay(cfg, rec);
    *recorded = std::move(rec);
    return full;
  }() : run(cfg);
  if (!cfg.simulation.allow_oom)  // no step time for a layout that cannot run
    devices::require_fits(r.memory, std::to_string(r.num_chips) + " x " + r.report.device + ", " + layout_string(r.dims),
                          remat_advice(cfg, r.dims, resolve_model_args(cfg, vocab_without_data(cfg)), r.memory));
  if (other_mode) {
    JobConfig other = cfg;
    other.comm.collective_mode =
        cfg.comm.collective_mode == CollectiveMode::kFused ? CollectiveMode::kSeparate : CollectiveMode::kFused;
    SimulationResult o = run(other);
    r.other_mode = to_string(other.comm.collective_mode);
    r.other_step_time_s = o.report.step_time_s;
    r.other_mfu_percent = o.mfu_percent;
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace titan
