// Simulated training (see simulate.h): record the trainer's step on the meta device over a
// `sim` World, replay it on the device model, report like a real run.
#include "trainer/simulate/simulate.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "collectives/world.h"
#include "common/error.h"
#include "trainer/config/config_folders.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/remat_advice.h"
#include "trainer/model/model.h"
#include "common/model_args.h"
#include "trainer/components/optimizer.h"
#include "trainer/step/parallelize.h"
#include "trainer/data/tokenizer.h"
#include "trainer/simulate/chrome_trace.h"
#include "trainer/simulate/exposed_comm.h"
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

namespace {

devices::ExecutionMode execution_mode(const JobConfig& cfg) {
  switch (cfg.simulation.execution) {
    case Execution::kEager: return devices::ExecutionMode::kEager;
    case Execution::kCompiled: return devices::ExecutionMode::kCompiled;
    case Execution::kDeferAndFuse: break;
  }
  return devices::ExecutionMode::kDeferAndFuse;
}

}  // namespace

RecordedStep record_step(const JobConfig& cfg, bool place) {
  RecordedStep out;
  out.chip = simulated_chip(cfg);
  const int64_t chips = cfg.simulation.num_chips;
  out.dims = parallel_dims(cfg, chips);  // degrees must multiply to num_chips
  // Context parallel records rank 0 of cp like any other: with the causal load balancing every
  // cp rank does the same attention work (parallel/context_parallel.h).
  if (place) out.placement = devices::place_on_device(out.chip, chips, mesh_dims(out.dims), cfg.simulation.topology);
  if (out.dims.pp > 1) {
    out.pipeline = std::make_shared<RecordedPipeline>(record_pipeline(cfg, chips, record_options(out.chip, execution_mode(cfg))));
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
  set_sim_world(chips, 0);
  CommOptions co = comm_options(cfg);
  co.backend = "sim";
  auto world = init_distributed(co);

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
    out.trace = recorder.finish();
    out.memory = devices::trace_memory(out.trace);
    out.calls = recorder.calls();
    out.op_counts = recorder.op_counts();
  }
  return out;
}

ReplayFigures replay_figures(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                             const devices::Placement& placement, bool keep_events) {
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
  const bool per_use = o.execution == devices::ExecutionMode::kCompiled && chip.compiled_covers_step && !chip.is_host();
  f.memory = rec.memory.of(fused, per_use);
  o.keep_events = keep_events;
  o.collective_mode = cfg.comm.collective_mode;
  o.async_tensor_parallel = cfg.parallelism.enable_async_tensor_parallel;
  if (rec.pipeline) {
    const RecordedPipeline& p = *rec.pipeline;
    f.segment_costs = cost_pipeline_segments(p, placement, chip, o);
    f.pipeline_structure = rec.pipeline;
    f.options = o;
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
    o.keep_events = true;  // exposed time by kind; dropped again unless asked for
    f.report = devices::simulate_step(rec.trace, placement, chip, o);
    f.exposed_by_kind = exposed_by_kind(f.report);
    if (!keep_events) f.report.events.clear();
  }
  return f;
}

SimulationResult finish_replay(const JobConfig& cfg, const ReplayFigures& f, const devices::ChipSpec& chip,
                               const devices::Placement& placement) {
  SimulationResult r;
  r.report = f.report;
  r.dims = f.dims;
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
                             const devices::Placement& placement, bool keep_events) {
  return finish_replay(cfg, replay_figures(cfg, rec, chip, placement, keep_events), chip, placement);
}

namespace {

SimulationResult replay(const JobConfig& cfg, const RecordedStep& rec) {
  return replay_step(cfg, rec, rec.chip, rec.placement);
}

}  // namespace

std::string layout_string(const ParallelDims& d) {
  std::ostringstream os;
  const std::pair<const char*, int64_t> dims[] = {
      {"pp", d.pp}, {"dp_replicate", d.dp_replicate}, {"dp_shard", d.dp_shard}, {"cp", d.cp}, {"tp", d.tp}};
  for (auto& [n, v] : dims) {
    if (v == 1) continue;
    os << (os.tellp() > 0 ? " x " : "") << n << " " << v;
  }
  return os.tellp() > 0 ? os.str() : "single chip";
}


SimulationResult simulate(const JobConfig& cfg, bool other_mode, RecordedStep* recorded) {
  const auto t0 = std::chrono::steady_clock::now();
  RecordedStep rec = record_step(cfg);
  SimulationResult r = replay(cfg, rec);
  if (recorded) *recorded = std::move(rec);
  if (!cfg.simulation.allow_oom)  // no step time for a layout that cannot run
    devices::require_fits(r.memory, std::to_string(r.num_chips) + " x " + r.report.device + ", " + layout_string(r.dims),
                          remat_advice(cfg, r.dims, resolve_model_args(cfg, vocab_without_data(cfg)), r.memory));
  if (other_mode) {
    JobConfig other = cfg;
    other.comm.collective_mode =
        cfg.comm.collective_mode == CollectiveMode::kFused ? CollectiveMode::kSeparate : CollectiveMode::kFused;
    SimulationResult o = replay(other, record_step(other));
    r.other_mode = to_string(other.comm.collective_mode);
    r.other_step_time_s = o.report.step_time_s;
    r.other_mfu_percent = o.mfu_percent;
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string format_report(const SimulationResult& r) {
  const auto& s = r.report;
  std::ostringstream os;
  os << std::fixed;
  os << "simulated step on " << r.num_chips << " x " << s.device << "\n";
  os << "  topology        " << s.topology << "\n";
  os << "  layout          " << layout_string(r.dims) << "  (" << r.placement << ")\n";
  os << "  execution       " << s.execution << ", collectives " << s.collective_mode << "\n";
  os << "  batch           " << r.global_batch << " x " << r.seq_len << " tokens, " << r.microbatches
     << " micro-batch(es) per rank\n";
  os << std::setprecision(4) << "  step time       " << s.step_time_s << " s\n";
  os << std::setprecision(1) << "  tokens/s/chip   " << r.tokens_per_s_per_chip << "\n";
  os << std::setprecision(1) << "  TFLOP/s/chip    " << r.tflops_per_chip << " of " << r.peak_flops / 1e12
     << " peak\n";
  os << std::setprecision(2) << "  MFU             " << r.mfu_percent
     << " %  (TorchTitan convention: 6 x params without input embedding + 12 x layers x heads x "
        "head_dim x seq per token, attention not halved)\n";
  os << "  memory/chip     " << r.memory.describe() << (r.memory.fits ? "  fits" : "  DOES NOT FIT") << "\n";
  if (!r.pipeline_schedule.empty()) {
    os << "  pipeline        " << r.pipeline_schedule << ", " << r.pipeline_stages << " stages, "
       << r.pipeline_microbatches << " micro-batches";
    if (r.pipeline_recorded_microbatches < r.pipeline_microbatches)
      os << " (replayed on " << r.pipeline_recorded_microbatches << " recorded)";
    os << "; bubble "
       << std::setprecision(1) << 100.0 * r.pipeline_bubble_fraction << " % of rank-time; per pipeline rank busy";
    for (double b : r.pipeline_rank_busy_s) os << " " << std::setprecision(4) << b;
    os << " s, memory";
    for (double g : r.pipeline_rank_memory_gib) os << " " << std::setprecision(2) << g;
    os << " GiB\n";
  }
  os << std::setprecision(4) << "  exposed comm    " << s.exposed_comm_s << " s (" << std::setprecision(1)
     << 100.0 * s.exposed_comm_fraction << " % of the step); compute " << std::setprecision(4) << s.compute_s
     << " s, comm busy " << s.comm_s << " s, idle " << s.idle_s << " s\n";
  os << "  largest costs  ";
  for (size_t i = 0; i < s.costs.size() && i < 3; ++i)
    os << (i ? ", " : " ") << s.costs[i].category << " " << std::setprecision(4) << s.costs[i].seconds << " s";
  os << "\n";
  if (!s.op_costs.empty()) {
    os << "  largest ops    ";
    for (size_t i = 0; i < s.op_costs.size() && i < 4; ++i)
      os << (i ? ", " : " ") << s.op_costs[i].category << " " << std::setprecision(4) << s.op_costs[i].seconds << " s";
    os << "\n";
  }
  // What the figures above rest on where nothing was measured (StepReport::uncertain).
  os << "  least sure of   " << std::setprecision(1) << 100.0 * devices::uncertain_share(s)
     << " % of the step rests on unmeasured figures" << (s.uncertain.empty() ? "" : ":") << "\n";
  for (size_t i = 0; i < s.uncertain.size() && i < 5; ++i)
    os << "                  " << std::setw(5) << std::setprecision(1)
       << 100.0 * s.uncertain[i].seconds / s.step_time_s << " %  " << s.uncertain[i].category << "\n";
  if (!r.other_mode.empty()) {
    os << std::setprecision(2) << "  other mode      " << r.other_mode << ": MFU " << r.other_mfu_percent
       << " %, step " << std::setprecision(4) << r.other_step_time_s << " s\n";
  }
  os << "  trace           " << s.ops << " ops -> " << s.kernels << " kernels, " << s.collectives
     << " collectives; simulated in " << std::setprecision(2) << r.wall_s << " s\n";
  return os.str();
}

std::string to_json(const SimulationResult& r) {
  const auto& s = r.report;
  nlohmann::json j;
  j["device"] = s.device;
  j["num_chips"] = r.num_chips;
  j["topology"] = s.topology;
  j["layout"] = {{"pp", r.dims.pp}, {"dp_replicate", r.dims.dp_replicate}, {"dp_shard", r.dims.dp_shard},
                 {"cp", r.dims.cp}, {"tp", r.dims.tp}};
  j["placement"] = r.placement;
  j["global_batch_size"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  j["microbatches"] = r.microbatches;
  j["step_time_s"] = s.step_time_s;
  j["tokens_per_s_per_chip"] = r.tokens_per_s_per_chip;
  j["tflops_per_chip"] = r.tflops_per_chip;
  j["mfu"] = r.mfu_percent;
  j["mfu_convention"] = "torchtitan: 6*N_no_input_embedding + 12*L*H*hd*seq per token, percent";
  j["peak_flops_per_chip"] = r.peak_flops;
  j["peak_memory_gib_per_chip"] = r.memory.total_gib();
  j["memory_capacity_gib_per_chip"] = static_cast<double>(r.memory.capacity) / devices::kGiB;
  j["fits_in_memory"] = r.memory.fits;
  j["exposed_comm_s"] = s.exposed_comm_s;
  j["exposed_comm_fraction"] = s.exposed_comm_fraction;
  j["compute_s"] = s.compute_s;
  j["comm_s"] = s.comm_s;
  j["idle_s"] = s.idle_s;
  j["collective_mode"] = s.collective_mode;
  j["execution"] = s.execution;
  nlohmann::json costs = nlohmann::json::array();
  for (const auto& c : s.costs) costs.push_back({{"category", c.category}, {"seconds", c.seconds}});
  j["costs"] = costs;
  nlohmann::json op_costs = nlohmann::json::array();
  for (const auto& c : s.op_costs) op_costs.push_back({{"op", c.category}, {"seconds", c.seconds}});
  j["op_costs"] = op_costs;
  nlohmann::json exposed = nlohmann::json::array();
  for (const auto& c : r.exposed_comm_by_kind) exposed.push_back({{"kind", c.category}, {"seconds", c.seconds}});
  j["exposed_comm_by_kind"] = exposed;
  nlohmann::json uncertain = nlohmann::json::array();
  for (const auto& c : s.uncertain)
    uncertain.push_back({{"basis", c.category}, {"seconds", c.seconds},
                         {"share_of_step", s.step_time_s > 0 ? c.seconds / s.step_time_s : 0.0}});
  j["uncertain"] = uncertain;
  j["uncertain_share"] = devices::uncertain_share(s);
  if (!r.other_mode.empty()) {
    j["other_collective_mode"] = r.other_mode;
    j["other_mode_mfu"] = r.other_mfu_percent;
    j["other_mode_step_time_s"] = r.other_step_time_s;
  }
  j["ops"] = s.ops;
  j["kernels"] = s.kernels;
  j["collectives"] = s.collectives;
  j["simulation_wall_s"] = r.wall_s;
  if (!r.pipeline_schedule.empty()) {
    j["pipeline"] = {{"schedule", r.pipeline_schedule},
                     {"stages", r.pipeline_stages},
                     {"microbatches", r.pipeline_microbatches},
                     {"recorded_microbatches", r.pipeline_recorded_microbatches},
                     {"bubble_fraction", r.pipeline_bubble_fraction},
                     {"rank_busy_s", r.pipeline_rank_busy_s},
                     {"rank_memory_gib", r.pipeline_rank_memory_gib}};
  }
  return j.dump(2);
}

void run_simulation(const JobConfig& cfg) {
  // Before the simulation, which takes seconds to minutes on a large model.
  create_folder_for("job.dump_folder", cfg.job.dump_folder);
  if (cfg.profiling.enable_profiling) create_folder_for("profiling.save_traces_folder", traces_folder(cfg));
  RecordedStep rec;  // kept for the Chrome trace below (one recording, not two)
  SimulationResult r = simulate(cfg, /*other_mode=*/true, cfg.profiling.enable_profiling ? &rec : nullptr);
  std::cout << format_report(r) << std::flush;
  if (cfg.parallelism.enable_async_tensor_parallel)
    std::cout << "  async TP        "
              << (r.dims.tp > 1 && cfg.parallelism.enable_sequence_parallel
                      ? "on: sequence-parallel collectives run as collective matmuls in tp chunks (fused mode)"
                      : "no effect: needs tensor_parallel_degree > 1 with enable_sequence_parallel")
              << std::endl;
  const std::string path = cfg.job.dump_folder + "/simulation.json";
  std::ofstream f(path);
  TITAN_CHECK(f.good(), "cannot write ", path);
  f << to_json(r) << "\n";
  std::cout << "  wrote           " << path << std::endl;
  if (cfg.profiling.enable_profiling) {
    const std::string title = "simulated step: " + layout_string(rec.dims) + " on " + rec.placement.describe();
    const std::string trace = write_trace_file(traces_folder(cfg) + "/simulated_step.json",
                                               step_trace_json(cfg, rec, rec.chip, rec.placement, title));
    std::cout << "  wrote           " << trace << " (Chrome trace of the simulated step)" << std::endl;
  }
}

}  // namespace titan
