// Best-layout table (see best_layout_table.h).
#include "study/best_layout_table.h"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

BestLayoutTable best_layout_table(const JobConfig& base, const SweepFile& sweep, RecordingCache& cache, int threads,
                                  const SearchSpace& space) {
  BestLayoutTable t;
  t.combos = sweep.combinations();
  for (size_t c = 0; c < t.combos.size(); ++c) {
    const Overrides& combo = t.combos[c];
    JobConfig b = base;
    Point best;
    best.overrides = combo;
    int64_t n = 0;
    try {
      for (const auto& [k, v] : combo) apply_override(b, k, v);
      validate(b);
      best.cfg = b;
      std::string label = "search";
      for (const auto& [k, v] : combo) label += " " + v;
      const SearchResult r = search_layouts(b, space, cache, threads, label);
      n = static_cast<int64_t>(r.points.size());
      t.stats.jobs += r.stats.jobs;
      t.stats.wall_s += r.stats.wall_s;
      t.stats.threads = r.stats.threads;
      if (!r.ranked.empty()) {
        best = r.points[r.ranked.front()];
        Overrides all = combo;
        all.insert(all.end(), best.overrides.begin(), best.overrides.end());
        best.overrides = all;
      } else {
        std::string why;
        for (const auto& [fam, w] : r.rejected) why += (why.empty() ? "" : " | ") + fam + ": " + w;
        best.reason = "no layout fits: " + why;
      }
    } catch (const std::exception& e) {
      best.reason = e.what();
    }
    t.best.push_back(std::move(best));
    t.searched.push_back(n);
  }
  return t;
}

namespace {

struct Row {
  std::string device, model, layout, detail, tps, mfu, price, cost, source;
};

Row row_of(const Point& p, const PriceTable& prices) {
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
    r.layout = "none fits";
    r.detail = p.reason.substr(0, 160);
    r.tps = r.mfu = r.cost = "-";
    return r;
  }
  std::ostringstream lay, det, tps, mfu, cost;
  lay << c.simulation.num_chips << " chips: " << layout_string(p.result.dims);
  det << "rows " << c.training.local_batch_size << ", " << (p.result.dims.pp > 1 ? p.result.pipeline_schedule + ", " : "")
      << "AC " << to_string(c.activation_checkpoint.mode) << ", " << to_string(c.comm.collective_mode);
  tps << std::fixed << std::setprecision(0) << p.result.tokens_per_s_per_chip;
  mfu << std::fixed << std::setprecision(1) << p.result.mfu_percent;
  r.layout = lay.str(), r.detail = det.str(), r.tps = tps.str(), r.mfu = mfu.str();
  if (price) {
    cost << std::fixed << std::setprecision(3) << usd_per_million_tokens(*price, p.result.tokens_per_s_per_chip);
    r.cost = cost.str();
  } else {
    r.cost = "-";
  }
  return r;
}

}  // namespace

std::string format_best_layout_table(const BestLayoutTable& t, const PriceTable& prices) {
  std::ostringstream os;
  os << std::left << std::setw(11) << "device" << std::setw(14) << "model" << std::setw(40) << "best layout"
     << std::right << std::setw(11) << "tok/s/chip" << std::setw(7) << "MFU %" << std::setw(9) << "$/chip-h"
     << std::setw(9) << "$/Mtok" << "  searched\n";
  for (size_t i = 0; i < t.best.size(); ++i) {
    const Row r = row_of(t.best[i], prices);
    os << std::left << std::setw(11) << r.device << std::setw(14) << r.model << std::setw(40) << r.layout
       << std::right << std::setw(11) << r.tps << std::setw(7) << r.mfu << std::setw(9) << r.price << std::setw(9)
       << r.cost << "  " << t.searched[i] << "\n";
    os << "           " << r.detail << "\n";
  }
  return os.str();
}

std::string write_best_layout_markdown(const std::string& path, const BestLayoutTable& t, const PriceTable& prices) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path);
  TITAN_CHECK(f.good(), "cannot write ", path);
  f << "| device | model | best layout | micro-batching, AC, collectives | tokens/s/chip | MFU % | $/chip-hour | "
       "$/M tokens |\n|---|---|---|---|---:|---:|---:|---:|\n";
  for (const auto& p : t.best) {
    const Row r = row_of(p, prices);
    f << "| " << r.device << " | " << r.model << " | " << r.layout << " | " << r.detail << " | " << r.tps << " | "
      << r.mfu << " | " << r.price << " | " << r.cost << " |\n";
  }
  f << "\nPrices (US$ per chip-hour) from " << prices.file << ":\n\n";
  for (const auto& [dev, pr] : prices.by_device) f << "- " << dev << ": " << pr.usd_per_chip_hour << " (" << pr.source << ")\n";
  return path;
}

}  // namespace titan::study
