// titan-study as a user runs it: a sweep file in, results.csv / results.jsonl and PNG plots
// out, the same figures on 1 and 2 threads; bad input is a clear error and exit status 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cmath>

#include "study/plots.h"
#include "study_fixture.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::read_file;

std::string tiny_args() {
  return "--config " + std::string(TITAN_SOURCE_DIR) +
         "/configs/qwen3_8b.toml --model.n_layers 2 --model.dim 256 --model.ffn_dim 768 --model.n_heads 8 "
         "--model.n_kv_heads 4 --model.head_dim 32 --model.vocab_size 4096 --training.seq_len 512 "
         "--simulation.device tpu-v5p";
}

int run(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(TITAN_BINARY_DIR) + "/bin/titan-study " + args + " >" + log + " 2>&1";
  return WEXITSTATUS(std::system(cmd.c_str()));
}

// An empty folder of the tests' named `name`, holding `file` with `text`.
std::string folder_with(const std::string& name, const std::string& file, const std::string& text) {
  const std::string dir = testing::tmp_dir(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + file) << text;
  return dir;
}

TEST(StudyCli, SweepWritesRowsAndPlotsIdenticallyOnOneAndTwoThreads) {
  const std::string dir =
      folder_with("cli", "sweep.toml",
                  "[study]\nname = \"cli\"\nx = \"simulation.num_chips\"\n[sweep]\n"
                  "\"simulation.num_chips\" = [4, 16]\n\"comm.collective_mode\" = [\"fused\", \"separate\"]\n");
  const std::string base = tiny_args() + " --study " + dir + "/sweep.toml --out ";
  ASSERT_EQ(run(base + dir + "/t1 --threads 1", dir + "/t1.log"), 0) << read_file(dir + "/t1.log");
  ASSERT_EQ(run(base + dir + "/t2 --threads 2", dir + "/t2.log"), 0) << read_file(dir + "/t2.log");
  // Step time, throughput and MFU agree to 1e-12 on 1 and 2 threads, memory and verdicts
  // exactly. The compute / idle split may differ in the 4th digit between processes: the recorder links
  // ops by storage address, so a recording depends slightly on the heap (docs/study.md).
  std::istringstream r1(read_file(dir + "/t1/results.jsonl")), r2(read_file(dir + "/t2/results.jsonl"));
  int rows = 0;
  for (std::string l1, l2; std::getline(r1, l1) && std::getline(r2, l2); ++rows) {
    const auto a = nlohmann::json::parse(l1), b = nlohmann::json::parse(l2);
    for (const char* k : {"simulation.num_chips", "comm.collective_mode", "verdict", "memory_gib"})
      EXPECT_EQ(a.at(k), b.at(k)) << k << " row " << rows;
    for (const char* k : {"step_time_s", "tokens_per_s_per_chip", "mfu", "usd_per_million_tokens"})
      EXPECT_NEAR(a.at(k).get<double>(), b.at(k).get<double>(), 1e-12 * std::abs(a.at(k).get<double>()))
          << k << " row " << rows;
    EXPECT_NEAR(a.at("compute_s").get<double>(), b.at("compute_s").get<double>(), 1e-2 * a.at("step_time_s").get<double>());
  }
  EXPECT_EQ(rows, 4);
  EXPECT_NE(read_file(dir + "/t2.log").find("4/4 done"), std::string::npos) << read_file(dir + "/t2.log");
  if (!find_gnuplot().empty()) {
    EXPECT_TRUE(is_png(dir + "/t1/cli_mfu.png"));
    EXPECT_TRUE(is_png(dir + "/t1/cli_breakdown.png"));
  }
}

// --all-candidates: every candidate of every combination, as the best-layout table saw them;
// each combination's best row is one of them, to the last bit, and none fitting is faster.
TEST(StudyCli, AllCandidatesHoldEachCombinationsBest) {
  const std::string dir =
      folder_with("cli_candidates", "search.toml",
                  "[study]\nname = \"cands\"\nsearch = true\n[sweep]\n\"simulation.num_chips\" = [4, 8]\n"
                  "[search]\ntp = [1, 2]\npp = [1]\ndp_replicate = [1]\nlocal_batch = [1]\n"
                  "activation_checkpoint = [\"full\"]\ncollective_modes = [\"fused\", \"separate\"]\n");
  ASSERT_EQ(run(tiny_args() + " --study " + dir + "/search.toml --no-plots --all-candidates --out " + dir + "/out",
                dir + "/run.log"),
            0)
      << read_file(dir + "/run.log");
  std::map<std::string, std::vector<nlohmann::json>> by_chips;  // swept values are written as given
  std::istringstream cands(read_file(dir + "/out/candidates.jsonl"));
  for (std::string l; std::getline(cands, l);) {
    const auto j = nlohmann::json::parse(l);
    by_chips[j.at("simulation.num_chips").get<std::string>()].push_back(j);
  }
  ASSERT_EQ(by_chips.size(), 2u);
  for (const auto& [chips, rows] : by_chips) EXPECT_EQ(rows.size(), 4u) << chips;  // tp 1, 2 x two modes
  std::istringstream best(read_file(dir + "/out/results.jsonl"));
  int n = 0;
  for (std::string l; std::getline(best, l); ++n) {
    const auto b = nlohmann::json::parse(l);
    const auto& rows = by_chips.at(b.at("simulation.num_chips").get<std::string>());
    EXPECT_EQ(std::count(rows.begin(), rows.end(), b), 1) << l;
    for (const auto& r : rows)
      if (r.at("verdict") == "ok")
        EXPECT_LE(r.at("tokens_per_s_per_chip").get<double>(), b.at("tokens_per_s_per_chip").get<double>());
  }
  EXPECT_EQ(n, 2);
  // Without a search per combination there is no table to add candidates to.
  EXPECT_EQ(run(tiny_args() + " --search --all-candidates --out " + dir + "/bad", dir + "/bad.log"), 2);
  EXPECT_NE(read_file(dir + "/bad.log").find("--all-candidates needs --study"), std::string::npos) << read_file(dir + "/bad.log");
}

TEST(StudyCli, BadInputIsAClearErrorAndStatus2) {
  const std::string dir = testing::tmp_dir("cli_bad");
  std::filesystem::create_directories(dir);
  EXPECT_EQ(run(tiny_args(), dir + "/none.log"), 2);
  EXPECT_NE(read_file(dir + "/none.log").find("--study"), std::string::npos);
  EXPECT_EQ(run(tiny_args() + " --study " + dir + "/missing.toml", dir + "/missing.log"), 2);
  EXPECT_NE(read_file(dir + "/missing.log").find("missing.toml"), std::string::npos);
  EXPECT_EQ(run(tiny_args() + " --search --threads x", dir + "/threads.log"), 2);
  EXPECT_NE(read_file(dir + "/threads.log").find("--threads"), std::string::npos);
  // Counts are bounded: 100000 recorders forked processes until descriptors ran out and the
  // study then outlived a 120 s limit; a count past int ended it with std::stoi's bare "stoi".
  EXPECT_EQ(run(tiny_args() + " --search --recorders 100000", dir + "/recorders.log"), 2);
  EXPECT_NE(read_file(dir + "/recorders.log").find("--recorders takes a count from 0 to 256, got '100000'"), std::string::npos);
  EXPECT_EQ(run(tiny_args() + " --search --threads 99999999999", dir + "/big.log"), 2);
  EXPECT_NE(read_file(dir + "/big.log").find("--threads takes a count"), std::string::npos) << read_file(dir + "/big.log");
  EXPECT_EQ(run(tiny_args() + " --search --serach", dir + "/option.log"), 2);
  EXPECT_NE(read_file(dir + "/option.log").find("unknown option --serach"), std::string::npos) << read_file(dir + "/option.log");
}

// A search run twice on one recording cache: the second reads every recording the first
// made (none recorded again) and writes the same results byte for byte; a cache without
// recorder processes, or in a folder that cannot be made, is a clear error.
TEST(StudyCli, ARepeatedSearchReadsItsRecordingsFromTheCache) {
  const std::string dir = testing::tmp_dir("cli_recording_cache");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string args = tiny_args() + " --simulation.num_chips 8 --search --recorders 2 --recording-cache " + dir +
                           "/cache --out " + dir + "/out";
  ASSERT_EQ(run(args, dir + "/first.log"), 0) << read_file(dir + "/first.log");
  const std::string first = read_file(dir + "/out/results.csv");
  ASSERT_EQ(run(args, dir + "/second.log"), 0) << read_file(dir + "/second.log");
  EXPECT_EQ(read_file(dir + "/out/results.csv"), first);
  // (read, written) from a run's line. Which probe degree a layout tries first follows the
  // threads' order (the last that worked), so a second run may ask for a probe the first did
  // not: a few recorded again.
  auto counts = [](const std::string& log) {
    std::smatch m;
    const bool found = std::regex_search(log, m, std::regex(R"(: (\d+) recordings read from it, (\d+) recorded and written \(0 damaged)"));
    EXPECT_TRUE(found) << log;
    return found ? std::make_pair(std::stoll(m[1]), std::stoll(m[2])) : std::make_pair(-1ll, -1ll);
  };
  const auto [read1, written1] = counts(read_file(dir + "/first.log"));
  const auto [read2, written2] = counts(read_file(dir + "/second.log"));
  EXPECT_EQ(read1, 0);
  EXPECT_GT(written1, 100);
  EXPECT_GE(read2, written1 * 95 / 100);
  EXPECT_LE(written2, written1 / 20);
  EXPECT_EQ(run(tiny_args() + " --search --recorders 0 --recording-cache " + dir + "/cache", dir + "/none.log"), 2);
  EXPECT_NE(read_file(dir + "/none.log").find("--recording-cache needs recorder processes"), std::string::npos)
      << read_file(dir + "/none.log");
  EXPECT_EQ(run(tiny_args() + " --search --recording-cache /proc/titan-none/cache", dir + "/bad.log"), 2);
  EXPECT_NE(read_file(dir + "/bad.log").find("recording cache /proc/titan-none/cache"), std::string::npos)
      << read_file(dir + "/bad.log");
}

// A sweep value the config cannot take is the file's mistake: exit 2 naming file, key and
// value before anything runs (an unknown key failed after the whole sweep, without the
// file's name; a bad value or device became an 'invalid' row and exit 0). An output folder
// that cannot be created fails at start, not when the results are written.
TEST(StudyCli, BadSweepValuesAndOutputFolderFailAtStart) {
  const std::string dir = testing::tmp_dir("cli_bad_sweep");
  std::filesystem::create_directories(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\"simulation.num_chipz\" = [8]", "[sweep] simulation.num_chipz = 8: "},
      {"\"simulation.num_chips\" = [8, \"eight\"]", "[sweep] simulation.num_chips = eight: "},
      {"\"simulation.device\" = [\"tpu-v5p\", \"abacus\"]", "[sweep] simulation.device = abacus: unknown device"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string sweep = dir + "/sweep" + std::to_string(i) + ".toml", log = dir + "/sweep" + std::to_string(i) + ".log";
    std::ofstream(sweep) << "[study]\nname = \"bad\"\n[sweep]\n" << cases[i].first << "\n";
    EXPECT_EQ(run(tiny_args() + " --study " + sweep + " --out " + dir + "/out --no-plots --recorders 0", log), 2)
        << read_file(log);
    EXPECT_NE(read_file(log).find("sweep file " + sweep + ": " + cases[i].second), std::string::npos) << read_file(log);
    EXPECT_EQ(read_file(log).find("done"), std::string::npos) << "ran before failing: " << read_file(log);
  }
  EXPECT_EQ(run(tiny_args() + " --search --out /proc/titan-none/out --recorders 0", dir + "/out.log"), 2);
  EXPECT_NE(read_file(dir + "/out.log").find("output folder /proc/titan-none/out"), std::string::npos) << read_file(dir + "/out.log");
  EXPECT_EQ(read_file(dir + "/out.log").find("done"), std::string::npos) << read_file(dir + "/out.log");
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
