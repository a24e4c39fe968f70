#include "trainer/step/rank_agreement.h"

#include <set>
#include <sstream>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/config/config_loader.h"

namespace titan {
namespace {

// Keys that may differ between hosts without changing what a rank computes or which
// collectives it issues: where files are (each host may mount them elsewhere), how many
// threads a rank uses, the MFU peak of its host, and free text.
const std::set<std::string>& per_host_keys() {
  static const std::set<std::string> keys = {
      "job.dump_folder",        "job.description",       "job.print_config",
      "model.tokenizer_path",   "training.dataset_path", "training.threads",
      "checkpoint.folder",      "checkpoint.initial_load_path", "profiling.save_traces_folder",
      "comm.rendezvous_dir",    "simulation.chip_file",  "metrics.peak_flops"};
  return keys;
}

// FNV-1a: the same value on every host (std::hash need not be).
int64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

// The gathered block per rank has a fixed length, so that ranks built from different
// sources (another key count) still issue equal all_gather sizes; unused slots stay 0.
constexpr int64_t kSlots = 512;

}  // namespace

std::vector<std::pair<std::string, std::string>> agreed_settings(const JobConfig& cfg, int64_t vocab_size) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(config_to_toml(cfg));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = section + "." + line.substr(0, eq);
    if (per_host_keys().count(key)) continue;
    out.emplace_back(std::move(key), line.substr(eq + 3));
  }
  out.emplace_back("model.vocab_size (resolved, with the tokenizer's vocabulary)", std::to_string(vocab_size));
  return out;
}

void check_ranks_agree(const JobConfig& cfg, int64_t vocab_size, Communicator& world) {
  const auto settings = agreed_settings(cfg, vocab_size);
  TITAN_CHECK(static_cast<int64_t>(settings.size()) <= kSlots, "rank agreement: ", settings.size(),
              " settings, more than the ", kSlots, " slots compared");
  auto mine = torch::zeros({kSlots}, torch::kInt64);
  auto* m = mine.data_ptr<int64_t>();
  for (size_t i = 0; i < settings.size(); ++i) m[i] = fnv1a(settings[i].first + "=" + settings[i].second);
  const int n = world.size();
  auto all = torch::empty({n * kSlots}, torch::kInt64);
  world.all_gather(all, mine)->wait();
  const auto* a = all.data_ptr<int64_t>();
  std::ostringstream msg;
  int differing = 0;
  size_t first = 0;
  for (size_t i = 0; i < settings.size(); ++i) {
    std::string ranks;
    for (int r = 1; r < n; ++r) {
      if (a[r * kSlots + i] != a[i]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    if (ranks.empty()) continue;
    if (differing == 0) first = i;
    if (++differing <= 3) {
      msg << (differing > 1 ? "; " : "") << settings[i].first << " on rank(s) " << ranks << " differs from rank 0's";
    }
  }
  if (differing > 3) msg << "; and " << differing - 3 << " more";
  // Every rank sees the same gathered table, so every rank stops here naming the same keys;
  // each adds its own value of the first one, so that the job's output shows both sides.
  TITAN_CONFIG_CHECK(differing == 0, "the ranks of this job were given different configs: ", msg.str(), " (rank ",
                     world.rank(), " has ", settings[first].first, " = ", settings[first].second,
                     "); every rank must get the same config file and overrides");
}

}  // namespace titan
