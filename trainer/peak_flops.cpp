#include "trainer/peak_flops.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "common/error.h"
#include "devices/chip_catalog.h"
#include "trainer/components/metrics.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace fs = std::filesystem;
namespace {

// The CPU model name: a cached probe figure is only reused on the same kind of CPU.
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown cpu";
}

std::string cache_key(int threads) {
  std::string key = cpu_model() + " | threads " + std::to_string(threads);
  for (auto& c : key) {
    if (c == '"' || c == '\\') c = '_';
  }
  return key;
}

// The cached figure (0 when none). *readable: false when the file exists but is not TOML, so
// that it is not overwritten: TITAN_PEAK_CACHE may point at a file that is no cache of ours.
double cached_probe(const std::string& path, const std::string& key, bool* readable) {
  *readable = true;
  std::error_code ec;
  if (!fs::exists(path, ec)) return 0;
  try {
    TITAN_CHECK(fs::is_regular_file(path, ec), "not a regular file");
    const toml::table t = toml::parse_file(path);
    return t[key].value_or(0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan: metrics: WARNING %s is not a peak cache (%s): the sgemm probe runs and is not cached\n",
                 path.c_str(), e.what());
    *readable = false;
    return 0;
  }
}

// True when the figure is in the cache file now.
bool store_probe(const std::string& path, const std::string& key, double flops) {
  toml::table t;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    try {
      t = toml::parse_file(path);  // cached_probe read it; another run may have rewritten it since
    } catch (const std::exception&) {
      return false;
    }
  }
  t.insert_or_assign(key, flops);
  fs::create_directories(fs::path(path).parent_path(), ec);
  // Written aside and renamed: concurrent runs never read half a file.
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << "# sgemm probe figures (FLOP/s per rank) for the training log's MFU; delete to re-measure\n"
        << t << "\n";
    if (!out.good()) {  // an unwritable cache only costs a probe next time
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

std::string peak_cache_path() {
  if (const char* p = std::getenv("TITAN_PEAK_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/titan/peak_flops.toml";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/titan/peak_flops.toml";
}

PeakFlops resolve_peak_flops(const JobConfig& cfg, int threads) {
  if (cfg.metrics.peak_flops > 0) return {cfg.metrics.peak_flops, "metrics.peak_flops", false};
  const std::string cal_path = cpu_calibration_path();
  std::error_code ec;
  if (fs::is_regular_file(cal_path, ec)) {
    try {
      const devices::CpuCalibration cal = devices::load_cpu_calibration(cal_path);
      if (cal.threads == 0 || cal.threads == threads) {
        return {cal.sgemm_flops, "cpu calibration " + cal_path + " (sgemm_flops, launch/calibrate-cpu)", false};
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "titan: metrics: WARNING ignoring %s for MFU: %s\n", cal_path.c_str(), e.what());
    }
  }
  const std::string cache = peak_cache_path(), key = cache_key(threads);
  bool readable = true;
  if (const double f = cached_probe(cache, key, &readable); f > 0) {
    return {f, "sgemm probe cached in " + cache + " [" + key + "]", true};
  }
  // The best of several short runs: load on the host only ever lowers a run's rate.
  double best = 0;
  for (int i = 0; i < 6; ++i) best = std::max(best, measure_peak_flops());
  // The log line must not claim a cache that a read-only or missing folder did not take.
  const bool cached = readable && store_probe(cache, key, best);
  const std::string where = cached ? "now cached in " + cache
                                   : "not cached (cannot write " + cache + "; set TITAN_PEAK_CACHE or metrics.peak_flops)";
  return {best, "sgemm probe, best of 6 x 0.25 s, " + where, true};
}

double capped_mfu_percent(double achieved_flops, const PeakFlops& peak, std::string* warn) {
  const double mfu = 100.0 * achieved_flops / peak.flops;
  if (mfu <= 100.0) return mfu;
  if (warn && warn->empty()) {
    *warn = "titan: metrics: WARNING the step ran at " + sci(achieved_flops) + " FLOP/s, " + sci(mfu) +
            "% of the peak " + sci(peak.flops) + " from " + peak.source + ": that peak is too low" +
            (peak.probed ? " (probed while the host was busy; delete the cache to measure again)" : "") +
            "; set metrics.peak_flops. MFU is shown capped at 100%";
  }
  return 100.0;
}

}  // namespace titan
