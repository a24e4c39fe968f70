// titan-study's command line (see study_cli.h).
#include "study/study_cli.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "common/error.h"
#include "study/best_layout_table.h"
#include "study/goodput.h"
#include "study/layout_search.h"
#include "study/plots.h"
#include "study/recorder_pool.h"
#include "study/recording_store.h"
#include "study/results_io.h"
#include "study/sweep_runner.h"
#include "trainer/simulate/chrome_trace.h"
#include "trainer/simulate/simulate.h"
#include "trainer/config/config_loader.h"

namespace titan::study {

std::string study_usage() {
  return "usage: titan-study --config BASE.toml [--study SWEEP.toml] [--search] [--threads N]\n"
         "                   [--prices PRICES.toml] [--out FOLDER] [--no-plots] [--top N] [--full-depth]\n"
         "                   [--every-degree] [--every-replica] [--recorders N] [--all-candidates]\n"
         "                   [--section.key VALUE ...]\n"
         "  --study   every combination of the sweep file's [sweep] values (a layout search per\n"
         "            combination when its [study] search = true); results.csv / .jsonl and plots\n"
         "  --search  the best layouts for the base config's model, device and chip count\n"
         "  --full-depth  record every point at its model's depth (no layer extrapolation from\n"
         "            shallow recordings; for comparisons)\n"
         "  --every-replica  record dp_replicate 1 layouts too (no derivation from the\n"
         "            dp_replicate 2 recording; for comparisons)\n"
         "  --every-degree  record every dp_shard degree (no resizing of one degree's recording;\n"
         "            for comparisons)\n"
         "  --recorders N  recorder processes, forked at the start (default: as many as threads);\n"
         "            0 records in this process, one step at a time\n"
         "  --recording-cache DIR  keep recordings in DIR between runs (entries named by the request\n"
         "            and the build ids of the code that records; about 4 GiB kept, least recently\n"
         "            used go first): a repeated study reads them instead of recording; needs\n"
         "            recorder processes\n"
         "  --trace   also write the base config's simulated step as a Chrome trace (FOLDER/step_trace.json)\n"
         "  --all-candidates  with a layout search per combination, also write every candidate of\n"
         "            every combination, fitting or not (FOLDER/candidates.csv / .jsonl; the JSON\n"
         "            lines carry each figure to the last bit, for comparing two builds)\n"
         "  results go to FOLDER (default <job.dump_folder>/study/<study name or 'search'>)\n";
}

namespace {

void print_stats(const char* what, const RunStats& st, const RecordingCache& cache, const RecordingStore* store) {
  char recorders_cpu[96] = "";
  if (cache.recording_in_processes())
    std::snprintf(recorders_cpu, sizeof recorders_cpu, ", %.2f s in the recorder processes since they started",
                  cache.recorder_cpu_seconds());
  std::fprintf(
      stderr,
      "titan-study: %s: %lld configurations in %.2f s = %.1f configurations/s on %d threads; "
      "%lld distinct per-rank steps recorded (%.2f s), %lld replays (of which %lld traces resizing left "
      "as the probe recorded them, %lld replays found in memory); %lld points extrapolated from "
      "shallow recordings (%lld sample sets failed the affine check, each sending its point deeper), "
      "%lld recorded at full depth; %lld steps resized from another dp_shard "
      "degree's recording (%lld in place), %lld not%s%s; %lld dp_replicate 1 probes derived from "
      "dp_replicate 2, %lld not%s%s; %zu recorder%s%s; CPU %.2f s in this process over the run%s\n",
      what, static_cast<long long>(st.jobs), st.wall_s, st.rate(), st.threads,
      static_cast<long long>(cache.recordings()), cache.record_seconds(),
      static_cast<long long>(cache.lookups()), static_cast<long long>(cache.replays_named.load()),
      static_cast<long long>(cache.replays_remembered.load()), static_cast<long long>(cache.extrapolated.load()),
      static_cast<long long>(cache.failed_fits.load()), static_cast<long long>(cache.full_depth.load()),
      static_cast<long long>(cache.resized.load()),
      static_cast<long long>(cache.resized_in_place.load()),
      static_cast<long long>(cache.not_resized.load()), cache.not_resized.load() ? " (first: " : "",
      cache.not_resized.load() ? (cache.first_not_resized() + ")").c_str() : "",
      static_cast<long long>(cache.derived_replicas.load()), static_cast<long long>(cache.not_derived.load()),
      cache.not_derived.load() ? " (first: " : "", cache.not_derived.load() ? (cache.first_not_derived() + ")").c_str() : "",
      cache.recorders(),
      cache.recorders() == 1 ? "" : "s",
      cache.recording_in_processes() ? " (processes)" : " (in-process)", st.cpu_s, recorders_cpu);
  if (store)
    std::fprintf(stderr,
                 "titan-study: recording cache %s: %lld recordings read from it, %lld recorded and written "
                 "(%lld damaged entries recorded again, %lld writes failed)\n",
                 store->dir().c_str(), static_cast<long long>(store->hits.load()),
                 static_cast<long long>(store->writes.load()), static_cast<long long>(store->damaged.load()),
                 static_cast<long long>(store->failed_writes.load()));
}

void write_step_trace(const JobConfig& cfg, RecordingCache& cache, const std::string& path) {
  const auto rec = cache.get(cfg);
  const devices::ChipSpec chip = simulated_chip(cfg);
  const auto placement =
      devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(rec->dims), cfg.simulation.topology);
  const std::string title = std::to_string(cfg.simulation.num_chips) + " x " + cfg.simulation.device + ", " +
                            layout_string(rec->dims) + ", " + to_string(cfg.comm.collective_mode);
  std::cout << "wrote " << write_trace_file(path, step_trace_json(cfg, *rec, chip, placement, title))
            << " (chrome://tracing, ui.perfetto.dev)\n";
}

// Every value of the sweep file must be one the config takes: a typo (an unknown key, a
// string for a count, an unknown device) is the file's mistake, reported with the file's
// name before anything runs, not a row marked invalid (or an error after the whole sweep).
// Combinations that do not fit together (tp 3 on 64 chips) stay rows of their own.
void check_sweep_values(const JobConfig& base, const SweepFile& sweep, const std::string& path) {
  JobConfig fixed = base;
  for (const auto& [k, v] : sweep.fixed) {
    try {
      apply_override(fixed, k, v);
    } catch (const Error& e) {
      TITAN_CONFIG_CHECK(false, "sweep file ", path, ": [fixed] ", k, " = ", v, ": ", e.what());
    }
  }
  bool chip_file_swept = false;
  for (const auto& [k, values] : sweep.axes) chip_file_swept = chip_file_swept || k == "simulation.chip_file";
  for (const auto& [k, values] : sweep.axes) {
    for (const auto& v : values) {
      JobConfig c = fixed;
      try {
        apply_override(c, k, v);
        // Devices resolve against the chip file, which a sweep may vary alongside.
        if (k == "simulation.device" && !chip_file_swept) (void)simulated_chip(c);
      } catch (const Error& e) {
        TITAN_CONFIG_CHECK(false, "sweep file ", path, ": [sweep] ", k, " = ", v, ": ", e.what());
      }
    }
  }
}

}  // namespace

int study_main(const std::vector<std::string>& args) {
  std::vector<std::string> cfg_args;
  std::string study_path, prices_path = default_prices_path(), out, recording_cache;
  bool search = false, plots = true, trace = false, full_depth = false, every_degree = false, every_replica = false,
       all_candidates = false;
  int threads = 0, recorders = -1;
  size_t top = 5;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      TITAN_CONFIG_CHECK(i + 1 < args.size(), a, " needs a value\n", study_usage());
      return args[++i];
    };
    // Bounded: each thread and recorder is real (a recorder is a forked process), and a count
    // std::stoi cannot hold ended the study with its bare "stoi".
    auto count = [&](const std::string& v, int most) {
      TITAN_CONFIG_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 9 &&
                             std::stoi(v) <= most,
                         a, " takes a count from 0 to ", most, ", got '", v, "'");
      return std::stoi(v);
    };
    if (a == "--help" || a == "-h") {
      std::cout << study_usage();
      return 0;
    } else if (a == "--study") study_path = value();
    else if (a == "--search") search = true;
    else if (a == "--threads") threads = count(value(), 4096);
    else if (a == "--top") top = static_cast<size_t>(count(value(), 1000000));
    else if (a == "--prices") prices_path = value();
    else if (a == "--out") out = value();
    else if (a == "--no-plots") plots = false;
    else if (a == "--trace") trace = true;
    else if (a == "--full-depth") full_depth = true;
    else if (a == "--every-degree") every_degree = true;
    else if (a == "--every-replica") every_replica = true;
    else if (a == "--recorders") recorders = count(value(), 256);
    else if (a == "--all-candidates") all_candidates = true;
    else if (a == "--recording-cache") {
      recording_cache = value();
      TITAN_CONFIG_CHECK(!recording_cache.empty(), "--recording-cache takes a folder, got an empty string");
    }
    else {
      // Config overrides are --section.key; anything else spelled as an option is a typo of one
      // of the flags above, which would otherwise reach the config loader as a key.
      const bool config_flag = a == "--config" || a.rfind("--config=", 0) == 0 || a.find('.') != std::string::npos;
      TITAN_CONFIG_CHECK(a.rfind("--", 0) != 0 || config_flag, "unknown option ", a, "\n", study_usage());
      cfg_args.push_back(a);
      if (a.rfind("--", 0) == 0 && a.find('=') == std::string::npos && i + 1 < args.size()) cfg_args.push_back(args[++i]);
    }
  }
  // Before anything starts a thread (recorder_pool.h): as many recorders as threads.
  if (recorders < 0) recorders = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  std::shared_ptr<RecordingStore> store;
  if (!recording_cache.empty()) {
    TITAN_CONFIG_CHECK(recorders > 0, "--recording-cache needs recorder processes (--recorders ", recorders, ")");
    store = std::make_shared<RecordingStore>(recording_cache);
  }
  std::vector<std::unique_ptr<Recorder>> recorder_processes = start_recorder_processes(recorders, store);
  TITAN_CONFIG_CHECK(!store || !recorder_processes.empty(),
                     "--recording-cache: no recorder process started (fork failed, or threads ran before the recorders)");
  TITAN_CONFIG_CHECK(!study_path.empty() || search || trace,
                     "give --study SWEEP.toml, --search, --trace or a combination\n", study_usage());
  const JobConfig base = load_job_config(cfg_args);
  const PriceTable prices = read_prices(prices_path);
  RecordingCache cache(std::move(recorder_processes));
  cache.layer_extrapolation = !full_depth;
  cache.resize_shards = !every_degree;
  cache.derive_replicas = !every_replica;
  SweepFile sweep;
  if (!study_path.empty()) sweep = read_sweep_file(study_path);
  if (!study_path.empty()) check_sweep_values(base, sweep, study_path);
  TITAN_CONFIG_CHECK(!all_candidates || (!study_path.empty() && (sweep.search || search)),
                     "--all-candidates needs --study with a layout search per combination ([study] search = true "
                     "or --search): --search alone writes every fitting layout to results.csv, a plain sweep every "
                     "point");
  if (out.empty()) out = base.job.dump_folder + "/study/" + (sweep.name.empty() ? "search" : sweep.name);
  {  // before the study runs, not when its results are written minutes later
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    TITAN_CONFIG_CHECK(!ec, "output folder ", out, " (--out or job.dump_folder): cannot be created (", ec.message(),
                       ")");
  }
  std::vector<std::string> keys;
  for (const auto& [k, v] : sweep.axes) keys.push_back(k);

  if (trace) write_step_trace(base, cache, out + "/step_trace.json");
  if (study_path.empty() && !search) return 0;
  if (study_path.empty()) {  // --search on the base config alone
    SearchResult r = search_layouts(base, SearchSpace{}, cache, threads, "titan-study search");
    print_stats("search", r.stats, cache, store.get());
    std::cout << "best layouts for " << base.simulation.num_chips << " x " << base.simulation.device << " ("
              << r.points.size() << " configurations):\n"
              << format_search(r, top);
    std::vector<Point> ranked;
    for (size_t i : r.ranked) ranked.push_back(r.points[i]);
    std::cout << "wrote " << write_results(out, {}, ranked, prices) << " (fitting layouts, best first)\n";
    return 0;
  }
  if (sweep.search || search) {  // a layout search per combination: the best-layout table
    BestLayoutTable t =
        best_layout_table(base, sweep, cache, threads, search_space_from(sweep.search_space, study_path),
                          all_candidates);
    print_stats("searches", t.stats, cache, store.get());
    std::cout << format_best_layout_table(t, prices);
    std::cout << "wrote " << write_results(out, keys, t.best, prices) << "\n";
    std::cout << "wrote " << write_best_layout_markdown(out + "/table.md", t, prices) << "\n";
    if (all_candidates)
      std::cout << "wrote " << write_results(out, keys, t.candidates, prices, "candidates") << " (every candidate)\n";
    if (plots)
      if (const std::string png = draw_goodput_plot(out, sweep.name, sweep.x_key, keys, t.best, prices); !png.empty())
        std::cout << "wrote " << png << "\n";
    return 0;
  }
  SweepRun run = run_sweep(base, sweep.combinations(), cache, threads, "titan-study " + sweep.name);
  print_stats("sweep", run.stats, cache, store.get());
  std::cout << format_goodput_table(run.points, keys, prices);
  std::cout << "wrote " << write_results(out, keys, run.points, prices) << "\n";
  if (plots) {
    for (const auto& png : draw_plots(out, sweep.name, sweep.x_key, keys, run.points)) std::cout << "wrote " << png << "\n";
    if (const std::string png = draw_goodput_plot(out, sweep.name, sweep.x_key, keys, run.points, prices); !png.empty())
      std::cout << "wrote " << png << "\n";
  }
  return 0;
}

}  // namespace titan::study
