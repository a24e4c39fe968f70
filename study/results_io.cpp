// Study result files (see results_io.h).
#include "study/results_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "study/goodput.h"
#include "trainer/config/config_keys.h"

namespace titan::study {

const std::vector<std::string>& result_columns() {
  static const std::vector<std::string> c = {
      "device", "num_chips", "pp", "dp_replicate", "dp_shard", "tp", "collective_mode", "execution",
      "activation_checkpoint", "pipeline_schedule", "local_batch_size", "global_batch_size", "seq_len",
      "microbatches", "verdict", "reason", "step_time_s", "tokens_per_s_per_chip", "tflops_per_chip", "mfu",
      "memory_gib", "memory_capacity_gib", "compute_s", "exposed_comm_s", "exposed_comm_by_kind", "bubble_s",
      "idle_s", "usd_per_chip_hour", "usd_per_million_tokens", "goodput", "run_wall_days", "run_failures",
      "checkpoint_interval_s", "straggler_factor", "run_usd", "run_usd_per_million_tokens", "kwh_per_million_tokens",
      "gco2_per_million_tokens", "assumed_figures"};
  return c;
}

const std::vector<std::string>& run_setting_columns() {
  static const std::vector<std::string> c = [] {
    JobConfig cfg;
    std::vector<std::string> keys;
    for (const auto& k : make_registry(cfg).keys)
      if (k.section == "goodput") keys.push_back(k.full());
    return keys;
  }();
  return c;
}

nlohmann::json point_json(const Point& p, const PriceTable& prices) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : p.overrides) j[k] = key_value(p.cfg, k);
  const auto& r = p.result;
  const auto& c = p.cfg;
  const bool has = p.verdict != Verdict::kInvalid;
  j["device"] = key_value(c, "simulation.device");
  j["num_chips"] = c.simulation.num_chips;
  j["pp"] = has ? r.dims.pp : 0;
  j["dp_replicate"] = has ? r.dims.dp_replicate : 0;
  j["dp_shard"] = has ? r.dims.dp_shard : 0;
  j["tp"] = has ? r.dims.tp : 0;
  j["collective_mode"] = key_value(c, "comm.collective_mode");
  j["execution"] = key_value(c, "simulation.execution");
  j["activation_checkpoint"] = ac_choice(c);
  j["pipeline_schedule"] = has && r.dims.pp > 1 ? r.pipeline_schedule : "";
  j["local_batch_size"] = c.training.local_batch_size;
  j["global_batch_size"] = has ? r.global_batch : 0;
  j["seq_len"] = c.training.seq_len;
  j["microbatches"] = has ? r.microbatches : 0;
  j["verdict"] = verdict_name(p.verdict);
  j["reason"] = p.reason;
  const bool ok = p.verdict == Verdict::kOk;
  auto num = [&](double v) { return ok ? nlohmann::json(v) : nlohmann::json(nullptr); };
  // The step's figures as simulation.json names them (trainer/simulate/simulate.h).
  for (const StepFigure& f : step_figures()) j[f.name] = num(f.of(r));
  j["memory_gib"] = has ? nlohmann::json(r.memory.total_gib()) : nlohmann::json(nullptr);
  j["memory_capacity_gib"] = has ? nlohmann::json(static_cast<double>(r.memory.capacity) / devices::kGiB)
                                 : nlohmann::json(nullptr);
  // "all_gather=0.0123 reduce_scatter=0.0045": seconds per kind, one field in CSV and JSONL.
  std::ostringstream kinds;
  kinds.precision(8);
  for (const auto& k : p.breakdown.exposed_by_kind) kinds << (kinds.tellp() > 0 ? " " : "") << k.category << "=" << k.seconds;
  j["exposed_comm_by_kind"] = ok ? nlohmann::json(kinds.str()) : nlohmann::json(nullptr);
  j["bubble_s"] = num(p.breakdown.bubble_s);
  j["idle_s"] = num(p.breakdown.idle_s);
  const auto price = prices.find(j["device"].get<std::string>());
  j["usd_per_chip_hour"] = price ? nlohmann::json(price->usd_per_chip_hour) : nlohmann::json(nullptr);
  j["usd_per_million_tokens"] =
      price && ok ? nlohmann::json(usd_per_million_tokens(*price, r.tokens_per_s_per_chip)) : nlohmann::json(nullptr);
  // The whole run (study/goodput.h): goodput, wall time, cost and energy of goodput.total_tokens.
  const RunFigures f = run_figures(p, prices);
  auto run = [&](bool have, double v) { return have ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const bool fin = f.ok && f.run.finishes;
  j["goodput"] = run(f.ok, f.run.goodput);
  j["run_wall_days"] = run(fin, f.run.wall_s / 86400);
  j["run_failures"] = run(fin, f.run.failures);
  j["checkpoint_interval_s"] = run(f.ok, f.run.interval_s);
  j["straggler_factor"] = run(f.ok, f.run.straggler_factor);
  j["run_usd"] = run(f.has_price, f.usd);
  j["run_usd_per_million_tokens"] = run(f.has_price, f.usd_per_mtok);
  j["kwh_per_million_tokens"] = run(f.has_energy, f.energy.kwh_per_mtok);
  j["gco2_per_million_tokens"] = run(f.has_energy, f.energy.gco2_per_mtok);
  j["assumed_figures"] = f.assumed;
  // The [goodput] settings the run columns were worked out with: reports quote them from here.
  for (const auto& k : run_setting_columns()) j[k] = key_value(c, k);
  return j;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch == '\n' ? ' ' : ch);
  return q + "\"";
}

namespace {

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_field(v.get<std::string>());
  if (v.is_number_float()) {
    std::ostringstream os;
    os.precision(8);
    os << v.get<double>();
    return os.str();
  }
  return v.dump();
}

}  // namespace

std::string write_results(const std::string& folder, const std::vector<std::string>& swept_keys,
                          const std::vector<Point>& points, const PriceTable& prices, const std::string& stem) {
  std::filesystem::create_directories(folder);
  const std::string csv_path = folder + "/" + stem + ".csv", jsonl_path = folder + "/" + stem + ".jsonl";
  std::ofstream csv(csv_path), jsonl(jsonl_path);
  TITAN_CHECK(csv.good() && jsonl.good(), "cannot write ", csv_path, " / ", jsonl_path);
  std::vector<std::string> cols = swept_keys;
  for (const auto* list : {&result_columns(), &run_setting_columns()})
    for (const auto& c : *list)
      if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
  for (size_t i = 0; i < cols.size(); ++i) csv << (i ? "," : "") << csv_field(cols[i]);
  csv << "\n";
  for (const auto& p : points) {
    const nlohmann::json j = point_json(p, prices);
    for (size_t i = 0; i < cols.size(); ++i) csv << (i ? "," : "") << (j.contains(cols[i]) ? cell(j[cols[i]]) : "");
    csv << "\n";
    jsonl << j.dump() << "\n";
  }
  return csv_path;
}

}  // namespace titan::study
