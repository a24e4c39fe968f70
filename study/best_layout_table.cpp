// Best-layout table (see best_layout_table.h).
#include "study/best_layout_table.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "study/goodput.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

BestLayoutTable best_layout_table(const JobConfig& base, const SweepFile& sweep, RecordingCache& cache, int threads,
                                  const SearchSpace& space, bool keep_candidates) {
  const RunTimer timer;  // the rate covers enumerating and prefetching too, not the jobs alone
  BestLayoutTable t;
  t.combos = sweep.combinations();
  for (const auto& [k, v] : sweep.axes) t.swept.push_back(k);
  const size_t n = t.combos.size();
  std::vector<JobConfig> bases(n, base);
  std::vector<std::string> errors(n);
  std::vector<bool> valid(n, false);  // the combination's config applied and validated
  std::vector<std::vector<Candidate>> cands(n);
  std::vector<std::map<std::string, std::string>> rejected(n);
  for (size_t c = 0; c < n; ++c) {
    try {
      for (const auto& [k, v] : t.combos[c]) apply_override(bases[c], k, v);
      validate(bases[c]);
      valid[c] = true;
      cands[c] = enumerate_layouts(bases[c].simulation.num_chips, space, rejected[c]);
    } catch (const std::exception& e) {
      errors[c] = e.what();
    }
  }
  // Every search's points in one pool, the i-th candidate of every combination after the
  // other: combinations that differ in chip count share their recordings (one per layout,
  // resized per dp_shard degree), so each recording's points are evaluated as soon as it is
  // made, while the recorder processes, given every point's recordings in that order up front,
  // make the next. Results are stored by index: the order never shows in them.
  std::vector<std::vector<Prefetched>> planned(n);  // each point's config and first depths
  for (size_t c = 0; c < n; ++c)
    for (const Candidate& cand : cands[c]) planned[c].push_back(plan_prefetch(bases[c], cand.overrides, cache));
  // The candidates that record the most layers first: their recordings take longest, and a
  // sample set that fails its fit asks for a deeper one only once replayed, a chain of waits;
  // queued last, those chains ran on one core at the end while the other idled (launch/bench-
  // study, 6 alternating pairs: median 0.44 idle core-seconds in the search, 0.23 this way).
  std::vector<int64_t> layers;  // by candidate index, the most of any combination
  for (size_t c = 0; c < n; ++c)
    for (size_t i = 0; i < planned[c].size(); ++i) {
      if (layers.size() <= i) layers.resize(i + 1, 0);
      const std::vector<int64_t>& d = planned[c][i].layers;
      layers[i] = std::max(layers[i], std::accumulate(d.begin(), d.end(), int64_t{0}));
    }
  std::vector<size_t> by_cost(layers.size());
  std::iota(by_cost.begin(), by_cost.end(), size_t{0});
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](size_t a, size_t b) { return layers[a] > layers[b]; });
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t i : by_cost)
    for (size_t c = 0; c < n; ++c)
      if (i < cands[c].size()) order.emplace_back(c, i);
  // A layout's points at every combination (chip count) on one thread, one after the other:
  // each resizes the same probes' recordings, in place of the previous one's.
  const int64_t jobs = static_cast<int64_t>(order.size());
  const int64_t chunk =
      std::max<int64_t>(1, std::min<int64_t>(static_cast<int64_t>(n), jobs / (4 * std::max(1, threads))));
  // The recorders stay two layouts' points ahead of the slowest thread (launch/bench-study:
  // 20% fewer page faults, peak 480 MB instead of 600 MB).
  cache.begin_points(2 * chunk);
  struct EndPoints {
    RecordingCache& cache;
    ~EndPoints() { cache.end_points(); }
  } end_points{cache};
  std::vector<Prefetched> pre;  // each point's config and recordings, taken by evaluate()
  for (const auto& [c, i] : order) {
    cache.prefetching_for(static_cast<int64_t>(pre.size()));
    pre.push_back(std::move(planned[c][i]));
    queue_prefetch(pre.back(), cache);
  }
  std::vector<std::vector<Point>> points(n);
  for (size_t c = 0; c < n; ++c) points[c].resize(cands[c].size());
  t.stats = run_parallel(
      jobs,
      [&](int64_t k) {
        const auto [c, i] = order[static_cast<size_t>(k)];
        cache.evaluating(k);
        points[c][i] = evaluate(bases[c], cands[c][i].overrides, cache, &pre[static_cast<size_t>(k)]);
        pre[static_cast<size_t>(k)] = Prefetched{};  // its config and any recording it still held
      },
      threads, "searches", chunk);
  t.stats.wall_s = timer.wall_s();
  t.stats.cpu_s = timer.cpu_s();
  // A candidate's overrides: its combination's, then its layout's.
  auto with_combination = [&](Point p, size_t c) {
    Overrides all = t.combos[c];
    all.insert(all.end(), p.overrides.begin(), p.overrides.end());
    p.overrides = std::move(all);
    return p;
  };
  if (keep_candidates)
    for (size_t c = 0; c < n; ++c)
      for (const Point& p : points[c]) t.candidates.push_back(with_combination(p, c));
  for (size_t c = 0; c < n; ++c) {
    Point best;
    best.overrides = t.combos[c];
    if (valid[c]) best.cfg = bases[c];
    if (!errors[c].empty()) {
      best.reason = errors[c];
    } else {
      const SearchResult r = rank_search(cands[c], std::move(points[c]), std::move(rejected[c]), t.stats);
      if (!r.ranked.empty()) {
        best = with_combination(r.points[r.ranked.front()], c);
      } else {
        std::string why;
        for (const auto& [fam, w] : r.rejected) why += (why.empty() ? "" : " | ") + fam + ": " + w;
        best.reason = "no layout fits: " + why;
      }
    }
    t.best.push_back(std::move(best));
    t.searched.push_back(static_cast<int64_t>(cands[c].size()));
  }
  return t;
}

namespace {

struct Row {
  std::string device, model, layout, detail, tps, mfu, price, cost, source;
  std::string goodput = "-", run_cost = "-", kwh = "-";  // the whole run (study/goodput.h)
};

// The combination's values of the swept keys the other columns do not show (device, model and
// chip count have their own; fixed keys are the same in every row): rows that differ only in,
// say, goodput.spare_fraction get distinct labels.
std::string other_swept(const Overrides& combo, const std::vector<std::string>& swept) {
  std::string s;
  for (const auto& [k, v] : combo)
    if (std::find(swept.begin(), swept.end(), k) != swept.end() && k != "simulation.device" &&
        k != "simulation.num_chips" && k != "model.name" && k != "model.flavor")
      s += (s.empty() ? "" : ", ") + k + " " + v;
  return s;
}

Row row_of(const Point& p, const std::string& swept, const PriceTable& prices) {
  Row r;
  const JobConfig& c = p.cfg;
  r.device = c.simulation.device;
  r.model = to_string(c.model.name) + " " + c.model.flavor;
  const auto price = prices.find(r.device);
  if (price) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << price->usd_per_chip_hour;
    r.price = os.str();
    r.source = price->source;
  } else {
    r.price = "-";
    r.source = "no price in the price file";
  }
  if (p.verdict != Verdict::kOk) {
    r.layout = swept.empty() ? "none fits" : swept + ": none fits";
    r.detail = p.reason.substr(0, 160);
    r.tps = r.mfu = r.cost = "-";
    return r;
  }
  std::ostringstream lay, det, tps, mfu, cost;
  lay << c.simulation.num_chips << " chips" << (swept.empty() ? "" : ", " + swept) << ": " << layout_string(p.result.dims);
  det << "rows " << c.training.local_batch_size << ", " << (p.result.dims.pp > 1 ? p.result.pipeline_schedule + ", " : "")
      << "AC " << ac_choice(c) << ", " << to_string(c.comm.collective_mode);
  tps << std::fixed << std::setprecision(0) << p.result.tokens_per_s_per_chip;
  mfu << std::fixed << std::setprecision(1) << p.result.mfu_percent;
  r.layout = lay.str(), r.detail = det.str(), r.tps = tps.str(), r.mfu = mfu.str();
  if (price) {
    cost << std::fixed << std::setprecision(3) << usd_per_million_tokens(*price, p.result.tokens_per_s_per_chip);
    r.cost = cost.str();
  } else {
    r.cost = "-";
  }
  const RunFigures f = run_figures(p, prices);
  std::ostringstream gp, rc, kwh;
  if (f.ok) gp << std::fixed << std::setprecision(1) << 100 * f.run.goodput, r.goodput = gp.str();
  if (f.has_price) rc << std::fixed << std::setprecision(3) << f.usd_per_mtok, r.run_cost = rc.str();
  if (f.has_energy) kwh << std::fixed << std::setprecision(3) << f.energy.kwh_per_mtok, r.kwh = kwh.str();
  return r;
}

}  // namespace

std::string format_best_layout_table(const BestLayoutTable& t, const PriceTable& prices) {
  std::ostringstream os;
  os << std::left << std::setw(11) << "device" << std::setw(14) << "model" << std::setw(40) << "best layout"
     << std::right << std::setw(11) << "tok/s/chip" << std::setw(7) << "MFU %" << std::setw(9) << "$/chip-h"
     << std::setw(9) << "$/Mtok" << std::setw(10) << "goodput %" << std::setw(11) << "run $/Mtok" << std::setw(10)
     << "kWh/Mtok" << "  searched\n";
  for (size_t i = 0; i < t.best.size(); ++i) {
    const Row r = row_of(t.best[i], other_swept(t.combos[i], t.swept), prices);
    os << std::left << std::setw(11) << r.device << std::setw(14) << r.model << std::setw(40) << r.layout
       << std::right << std::setw(11) << r.tps << std::setw(7) << r.mfu << std::setw(9) << r.price << std::setw(9)
       << r.cost << std::setw(10) << r.goodput << std::setw(11) << r.run_cost << std::setw(10) << r.kwh << "  "
       << t.searched[i] << "\n";
    os << "           " << r.detail << "\n";
  }
  for (const auto& a : assumed_figure_lines(t.best, prices)) os << a << "\n";
  return os.str();
}

namespace {

// The prices file as a reader of the repository finds it: relative to the source tree when in it.
std::string shown_path(const std::string& file) {
  const std::filesystem::path rel = std::filesystem::path(file).lexically_relative(TITAN_SOURCE_DIR);
  return rel.empty() || rel.string().rfind("..", 0) == 0 ? file : rel.string();
}

}  // namespace

std::string write_best_layout_markdown(const std::string& path, const BestLayoutTable& t, const PriceTable& prices) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path);
  TITAN_CHECK(f.good(), "cannot write ", path);
  f << "| device | model | best layout | micro-batching, AC, collectives | tokens/s/chip | MFU % | $/chip-hour | "
       "$/M tokens (step) | goodput % | $/M tokens (run) | kWh/M tokens |\n"
       "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (size_t i = 0; i < t.best.size(); ++i) {
    const Row r = row_of(t.best[i], other_swept(t.combos[i], t.swept), prices);
    f << "| " << r.device << " | " << r.model << " | " << r.layout << " | " << r.detail << " | " << r.tps << " | "
      << r.mfu << " | " << r.price << " | " << r.cost << " | " << r.goodput << " | " << r.run_cost << " | " << r.kwh
      << " |\n";
  }
  if (!t.best.empty())
    f << "\nThe run columns are for " << t.best.front().cfg.goodput.total_tokens
      << " tokens (goodput.total_tokens): goodput is the useful share of the expected wall time once failures, "
         "restarts, lost work, checkpoint saves and stragglers are counted; $ and kWh cover the whole wall time "
         "(docs/goodput.md).\n";
  for (const auto& a : assumed_figure_lines(t.best, prices)) f << "\n" << a << "\n";
  f << "\nPrices (US$ per chip-hour) from " << shown_path(prices.file) << ":\n\n";
  for (const auto& [dev, pr] : prices.by_device) f << "- " << dev << ": " << pr.usd_per_chip_hour << " (" << pr.kind << "; " << pr.source << ")\n";
  return path;
}

}  // namespace titan::study
