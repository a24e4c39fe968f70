// Simulation reports (see simulate.h): the layout's name, the printed report, simulation.json,
// and titan-train's entry that writes them.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/config/config_folders.h"
#include "trainer/simulate/chrome_trace.h"
#include "trainer/simulate/simulate.h"

namespace titan {

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


std::string format_report(const SimulationResult& r) {
  const auto& s = r.report;
  std::ostringstream os;
  os << std::fixed;
  os << "simulated step on " << r.num_chips << " x " << s.device << "\n";
  os << "  topology        " << s.topology << "\n";
  os << "  layout          " << layout_string(r.dims);
  if (r.ep > 1) os << ", experts over ep " << r.ep << " (from dp_shard x cp)";
  if (r.etp > 1) os << ", etp " << r.etp;
  os << "  (" << r.placement << ")\n";
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
  if (!r.extrapolated_from_layers.empty()) {
    os << "  depth           extrapolated from " << r.extrapolated_from_layers[0] << ", "
       << r.extrapolated_from_layers[1] << ", " << r.extrapolated_from_layers[2] << " recorded layers\n";
    for (const std::string& why : r.rejected_samples) os << "                  (samples " << why << ")\n";
  } else if (!r.full_depth_reason.empty()) {
    os << "  depth           recorded at full depth: " << r.full_depth_reason << "\n";
  }
  return os.str();
}

const std::vector<StepFigure>& step_figures() {
  static const std::vector<StepFigure> figures = {
      {"step_time_s", [](const SimulationResult& r) { return r.report.step_time_s; }},
      {"tokens_per_s_per_chip", [](const SimulationResult& r) { return r.tokens_per_s_per_chip; }},
      {"tflops_per_chip", [](const SimulationResult& r) { return r.tflops_per_chip; }},
      {"mfu", [](const SimulationResult& r) { return r.mfu_percent; }},
      {"compute_s", [](const SimulationResult& r) { return r.report.compute_s; }},
      {"exposed_comm_s", [](const SimulationResult& r) { return r.report.exposed_comm_s; }},
  };
  return figures;
}

std::string to_json(const SimulationResult& r) {
  const auto& s = r.report;
  nlohmann::json j;
  j["device"] = s.device;
  j["num_chips"] = r.num_chips;
  j["topology"] = s.topology;
  j["layout"] = {{"pp", r.dims.pp}, {"dp_replicate", r.dims.dp_replicate}, {"dp_shard", r.dims.dp_shard},
                 {"cp", r.dims.cp}, {"tp", r.dims.tp}, {"ep", r.ep}, {"etp", r.etp}};
  j["placement"] = r.placement;
  j["global_batch_size"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  j["microbatches"] = r.microbatches;
  for (const StepFigure& f : step_figures()) j[f.name] = f.of(r);
  j["mfu_convention"] = "torchtitan: 6*N_no_input_embedding + 12*L*H*hd*seq per token, percent";
  j["peak_flops_per_chip"] = r.peak_flops;
  j["peak_memory_gib_per_chip"] = r.memory.total_gib();
  j["memory_capacity_gib_per_chip"] = static_cast<double>(r.memory.capacity) / devices::kGiB;
  j["fits_in_memory"] = r.memory.fits;
  j["exposed_comm_fraction"] = s.exposed_comm_fraction;
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
  j["layer_extrapolation"] = {{"extrapolated", !r.extrapolated_from_layers.empty()},
                              {"recorded_layers", r.extrapolated_from_layers},
                              {"full_depth_reason", r.full_depth_reason},
                              {"rejected_samples", r.rejected_samples}};
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
