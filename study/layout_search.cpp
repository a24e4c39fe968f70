// Layout search (see layout_search.h).
#include "study/layout_search.h"

#include <algorithm>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {
namespace {

std::string family_name(int64_t pp, int64_t rep, int64_t shard, int64_t cp, int64_t tp) {
  ParallelDims d;
  d.pp = pp, d.dp_replicate = rep, d.dp_shard = shard, d.cp = cp, d.tp = tp;
  return layout_string(d);
}

}  // namespace

SearchSpace search_space_from(const std::vector<std::pair<std::string, std::vector<std::string>>>& lists,
                              const std::string& label) {
  SearchSpace s;
  for (const auto& [key, values] : lists) {
    const std::string where = label + ": search." + key;
    auto counts = [&] {
      std::vector<int64_t> out;
      for (const auto& v : values) {
        TITAN_CONFIG_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && std::stoll(v) > 0,
                           where, ": '", v, "' is not a positive count");
        out.push_back(std::stoll(v));
      }
      return out;
    };
    if (key == "tp") s.tp = counts();
    else if (key == "cp") s.cp = counts();
    else if (key == "ep") s.ep = counts();
    else if (key == "pp") s.pp = counts();
    else if (key == "dp_replicate") s.dp_replicate = counts();
    else if (key == "local_batch") s.local_batch = counts();
    else if (key == "pp_microbatches") s.pp_microbatches = counts();
    else if (key == "schedules") s.schedules = values;
    else if (key == "activation_checkpoint") {
      for (const auto& v : values)
        TITAN_CONFIG_CHECK(v == "none" || v == "selective" || v == "full" || v == "op", where, ": '", v,
                           "' is not an activation checkpointing choice (none, selective, full, op)");
      s.activation_checkpoint = values;
    }
    else if (key == "collective_modes") s.collective_modes = values;
    else if (key == "etp") {
      for (const auto& v : values)
        TITAN_CONFIG_CHECK(v == "1" || v == "tp", where, ": '", v,
                           "' is not an expert tensor parallel choice (\"1\": experts whole per tp rank, \"tp\": "
                           "experts sharded over tp)");
      s.etp = values;
    }
    else
      TITAN_CONFIG_CHECK(false, where, ": unknown key (tp, cp, ep, etp, pp, dp_replicate, local_batch, pp_microbatches, "
                                       "schedules, activation_checkpoint, collective_modes)");
  }
  return s;
}

std::vector<Candidate> enumerate_layouts(int64_t chips, const SearchSpace& s,
                                         std::map<std::string, std::string>& skipped) {
  std::vector<Candidate> out;
  for (int64_t pp : s.pp)
    for (int64_t tp : s.tp)
      for (int64_t cp : s.cp)
      for (int64_t rep : s.dp_replicate) {
        const int64_t fixed = pp * tp * cp * rep;
        if (chips % fixed != 0) {
          std::ostringstream why;
          why << "divisibility: pp x tp x cp x dp_replicate = " << fixed << " does not divide " << chips << " chips";
          skipped["pp " + std::to_string(pp) + " x dp_replicate " + std::to_string(rep) +
                  (cp > 1 ? " x cp " + std::to_string(cp) : "") + " x tp " + std::to_string(tp)] = why.str();
          continue;
        }
        const int64_t shard = chips / fixed;
        for (int64_t ep : s.ep)
        for (const std::string& etp : s.etp) {
        if (etp == "tp" && tp == 1) continue;  // the same layout as etp 1
        const std::string family = family_name(pp, rep, shard, cp, tp) + (ep > 1 ? " x ep " + std::to_string(ep) : "") +
                                   (etp == "tp" ? " x etp " + std::to_string(tp) : "");
        if ((shard * cp) % ep != 0) {
          skipped[family] = "divisibility: ep " + std::to_string(ep) + " does not divide dp_shard x cp = " +
                            std::to_string(shard * cp);
          continue;
        }
        Overrides degrees = {{"parallelism.pipeline_parallel_degree", std::to_string(pp)},
                             {"parallelism.tensor_parallel_degree", std::to_string(tp)},
                             {"parallelism.data_parallel_replicate_degree", std::to_string(rep)},
                             {"parallelism.data_parallel_shard_degree", std::to_string(shard)}};
        // Named only when searched, so that recordings of other searches keep their keys.
        if (s.cp.size() > 1 || cp > 1) degrees.emplace_back("parallelism.context_parallel_degree", std::to_string(cp));
        if (s.ep.size() > 1 || ep > 1) degrees.emplace_back("parallelism.expert_parallel_degree", std::to_string(ep));
        if (s.etp.size() > 1 || etp == "tp")
          degrees.emplace_back("parallelism.expert_tensor_parallel_degree", etp == "tp" ? std::to_string(tp) : "1");
        std::vector<std::pair<std::string, int64_t>> batching;  // schedule, rows per rank
        if (pp == 1) {
          for (int64_t b : s.local_batch) batching.emplace_back("", b);
        } else {
          for (const auto& sched : s.schedules)
            for (int64_t m : s.pp_microbatches) batching.emplace_back(sched, pp * m);
        }
        for (const auto& [sched, rows] : batching)
          for (const auto& ac : s.activation_checkpoint)
            for (const auto& mode : s.collective_modes) {
              Candidate c;
              c.family = family;
              c.overrides = degrees;
              c.overrides.emplace_back("training.local_batch_size", std::to_string(rows));
              if (!sched.empty()) {
                c.overrides.emplace_back("parallelism.pipeline_parallel_schedule", sched);
                c.overrides.emplace_back("parallelism.pipeline_parallel_microbatch_size", "1");
              }
              if (ac == "op") {
                c.overrides.emplace_back("activation_checkpoint.mode", "selective");
                c.overrides.emplace_back("activation_checkpoint.selective_ac_option", "op");
              } else {
                c.overrides.emplace_back("activation_checkpoint.mode", ac);
                // every Nth block even where the base config asks for the op-level policy
                if (ac == "selective") c.overrides.emplace_back("activation_checkpoint.selective_ac_option", "");
              }
              c.overrides.emplace_back("comm.collective_mode", mode);
              out.push_back(std::move(c));
            }
        }
      }
  return out;
}

SearchResult search_layouts(const JobConfig& base, const SearchSpace& space, RecordingCache& cache, int threads,
                            const std::string& label) {
  std::map<std::string, std::string> rejected;
  const std::vector<Candidate> cands = enumerate_layouts(base.simulation.num_chips, space, rejected);
  std::vector<Point> points(cands.size());
  const RunStats st = run_parallel(
      static_cast<int64_t>(cands.size()), [&](int64_t i) { points[i] = evaluate(base, cands[i].overrides, cache); },
      threads, label);
  return rank_search(cands, std::move(points), std::move(rejected), st);
}

SearchResult rank_search(const std::vector<Candidate>& cands, std::vector<Point> points,
                         std::map<std::string, std::string> rejected, const RunStats& stats) {
  SearchResult r;
  r.points = std::move(points);
  r.rejected = std::move(rejected);
  r.stats = stats;
  for (size_t i = 0; i < cands.size(); ++i)
    if (r.families.empty() || r.families.back() != cands[i].family) r.families.push_back(cands[i].family);
  for (size_t i = 0; i < r.points.size(); ++i)
    if (r.points[i].verdict == Verdict::kOk) r.ranked.push_back(i);
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [&](size_t a, size_t b) {
    return r.points[a].result.tokens_per_s_per_chip > r.points[b].result.tokens_per_s_per_chip;
  });
  // Why each family without a fitting member failed.
  for (const auto& fam : r.families) {
    int64_t n = 0, oom = 0, invalid = 0;
    double least_gib = 0, capacity = 0;
    std::string first_invalid;
    bool ok = false;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (cands[i].family != fam) continue;
      const Point& p = r.points[i];
      ++n;
      if (p.verdict == Verdict::kOk) ok = true;
      if (p.verdict == Verdict::kDoesNotFit) {
        const double g = p.result.memory.total_gib();
        if (oom++ == 0 || g < least_gib) least_gib = g;
        capacity = static_cast<double>(p.result.memory.capacity) / devices::kGiB;
      }
      if (p.verdict == Verdict::kInvalid && invalid++ == 0) first_invalid = p.reason;
    }
    if (ok) continue;
    std::ostringstream why;
    why << std::fixed << std::setprecision(1);
    if (oom) why << "memory: " << oom << " of " << n << " need more than " << capacity << " GiB (least " << least_gib
                 << " GiB)";
    if (invalid) {
      const std::string line = first_invalid.substr(0, first_invalid.find('\n'));
      why << (oom ? "; " : "") << "divisibility/config: " << invalid << " of " << n << " refused (" << line << ")";
    }
    r.rejected[fam] = why.str();
  }
  return r;
}

std::string format_search(const SearchResult& r, size_t n) {
  std::ostringstream os;
  os << std::fixed;
  os << "  # layout                                     rows sched            AC         mode      tok/s/chip  MFU %  "
        "mem GiB\n";
  for (size_t k = 0; k < r.ranked.size() && k < n; ++k) {
    const Point& p = r.points[r.ranked[k]];
    const auto& c = p.cfg;
    os << std::setw(3) << k + 1 << " " << std::left << std::setw(42) << layout_string(p.result.dims) << " "
       << std::right << std::setw(4) << c.training.local_batch_size << " " << std::left << std::setw(16)
       << (p.result.dims.pp > 1 ? p.result.pipeline_schedule : "-") << " " << std::setw(10)
       << ac_choice(c) << " " << std::setw(9) << to_string(c.comm.collective_mode)
       << std::right << std::setprecision(0) << std::setw(11) << p.result.tokens_per_s_per_chip << " "
       << std::setprecision(2) << std::setw(6) << p.result.mfu_percent << " " << std::setprecision(1) << std::setw(8)
       << p.result.memory.total_gib() << "\n";
  }
  if (r.ranked.empty()) os << "  no layout fits\n";
  if (!r.rejected.empty()) os << "rejected families:\n";
  for (const auto& [fam, why] : r.rejected) os << "  " << fam << ": " << why << "\n";
  return os.str();
}

}  // namespace titan::study
