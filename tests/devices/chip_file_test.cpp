// Tests for chip data files: every catalog figure carries a source, a user's chip file adds or
// overrides a chip without recompiling, and a bad file fails naming the file, line and key.
#include "devices/chip_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "tests/error_of.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) { return titan::error_of(f, ErrorKind::kConfig); }

TEST(ChipFile, EveryCatalogFigureHasASourceAndUnitsConvert) {
  for (const std::string& name : chip_names()) {
    const ChipSpec& c = catalog_chip(name);
    EXPECT_EQ(c.file, chip_dir() + "/" + name + ".toml");
    for (const auto& [key, source] : c.sources) EXPECT_FALSE(source.empty()) << name << " " << key;
  }
  ChipSpec v7 = find_chip("tpu-v7");
  EXPECT_NE(v7.sources.at("compute.peak_bf16_flops").find("Cloud TPU v7"), std::string::npos);
  // 1.2 TB/s bidi per chip over 6 links x 2 directions, given as `per = 12`.
  EXPECT_DOUBLE_EQ(v7.link_bytes_per_s, 100e9);
  EXPECT_DOUBLE_EQ(find_chip("trn1").scale_out_bytes_per_s, 800e9 / 8 / 16);  // 800 Gb/s per 16
  // A derived chip keeps its base's figures and sources unless it sets them.
  ChipSpec h200 = find_chip("h200");
  EXPECT_EQ(h200.matmul_units, 132);
  EXPECT_NE(h200.sources.at("matmul.units").find("132 SMs"), std::string::npos);
  EXPECT_DOUBLE_EQ(h200.hbm_bytes_per_s, 4.8e12);
}

TEST(ChipFile, UserFileAddsAChip) {
  const std::string path = write_file("titan_user_chip.toml", R"(
name = "my-gpu"
description = "an H100 with twice the HBM bandwidth"
base = "h100"
[memory]
source = "what-if study"
hbm_bytes_per_s = { value = 6.7, unit = "TB/s" }
hbm_bytes = { value = 160, unit = "GB", source = "what-if, 2 stacks more" }
)");
  ChipSpec c = find_chip("my-gpu", nullptr, path);
  EXPECT_EQ(c.name, "my-gpu");
  EXPECT_EQ(c.file, path);
  EXPECT_DOUBLE_EQ(c.hbm_bytes_per_s, 6.7e12);
  EXPECT_EQ(c.hbm_bytes, int64_t{160} * 1000 * 1000 * 1000);
  EXPECT_EQ(c.sources.at("memory.hbm_bytes_per_s"), "what-if study");  // the table's source
  EXPECT_EQ(c.sources.at("memory.hbm_bytes"), "what-if, 2 stacks more");
  EXPECT_DOUBLE_EQ(c.peak_bf16_flops, 989e12);  // from the base
  EXPECT_EQ(c.fast_fabric, "NVLink");
  // Catalog chips stay reachable with the file given.
  EXPECT_DOUBLE_EQ(find_chip("h100", nullptr, path).hbm_bytes_per_s, 3.35e12);
}

TEST(ChipFile, UserFileOverridesACatalogChip) {
  const std::string path = write_file("titan_override_chip.toml", R"(
name = "tpu-v7"
base = "tpu-v7"
[fabric]
link_bytes_per_s = { value = 200, unit = "GB/s", source = "what-if: twice the ICI" }
)");
  ChipSpec c = find_chip("TPU-v7", nullptr, path);
  EXPECT_DOUBLE_EQ(c.link_bytes_per_s, 200e9);
  EXPECT_DOUBLE_EQ(c.peak_bf16_flops, 2307e12);
  EXPECT_DOUBLE_EQ(find_chip("tpu-v7").link_bytes_per_s, 100e9);  // catalog unchanged
}

TEST(ChipFile, SustainedClockIsBorrowedOnlyFromAChipThatHasOne) {
  // A user chip based on v5p inherits its fitted share; one that names a donor takes the
  // donor's (measured or fitted) share.
  const std::string ok = write_file("titan_borrow_ok.toml", R"(
name = "my-tpu"
base = "tpu-v5p"
)");
  EXPECT_DOUBLE_EQ(find_chip("my-tpu", nullptr, ok).clock_ratio(), find_chip("tpu-v5p").clock_ratio());
  const std::string from = write_file("titan_borrow_from.toml", R"(
name = "my-tpu4"
base = "tpu-v5e"
[compute]
sustained_clock_from = "tpu-v6e"
)");
  EXPECT_DOUBLE_EQ(find_chip("my-tpu4", nullptr, from).clock_ratio(), find_chip("tpu-v6e").fitted_clock_share);
  // Its own sustained clock wins over the borrowed one.
  const std::string own = write_file("titan_borrow_own.toml", R"(
name = "my-tpu2"
base = "tpu-v5p"
[compute]
source = "what-if"
peak_clock = { value = 1000, unit = "MHz" }
sustained_clock = { value = 900, unit = "MHz" }
)");
  EXPECT_DOUBLE_EQ(find_chip("my-tpu2", nullptr, own).clock_ratio(), 0.9);
  // A donor without a measured or fitted share is an error naming the file and the key.
  const std::string bad = write_file("titan_borrow_bad.toml", R"(
name = "my-tpu3"
base = "tpu-v5e"
[compute]
sustained_clock_from = "trn2"
)");
  const std::string m = error_of([&] { find_chip("my-tpu3", nullptr, bad); });
  EXPECT_NE(m.find("titan_borrow_bad.toml"), std::string::npos) << m;
  EXPECT_NE(m.find("sustained_clock_from = 'trn2'"), std::string::npos) << m;
}

TEST(ChipFile, BadFilesNameFileLineAndKey) {
  std::string m = error_of([] {
    find_chip("x", nullptr,
              write_file("titan_bad1.toml", "name = \"x\"\nbase = \"h100\"\n[compute]\n"
                                            "peak_bf16_flop = { value = 1, source = \"s\" }\n"));
  });
  EXPECT_NE(m.find("titan_bad1.toml:4: unknown key 'compute.peak_bf16_flop'"), std::string::npos)
      << m;
  EXPECT_NE(m.find("peak_bf16_flops"), std::string::npos) << m;  // lists the known keys

  // A table that holds no keys at all listed none ("known in [chip]: "): now the tables.
  m = error_of([] { find_chip("x", nullptr, write_file("titan_bad_table.toml", "[chip]\nname = \"x\"\n")); });
  EXPECT_NE(m.find("titan_bad_table.toml:1: unknown table [chip] (top level: name"), std::string::npos) << m;
  EXPECT_NE(m.find("tables: compute memory"), std::string::npos) << m;

  m = error_of([] {
    find_chip("x", nullptr,
              write_file("titan_bad2.toml", "name = \"x\"\nbase = \"h100\"\n[memory]\n"
                                            "hbm_bytes_per_s = 3e12\n"));
  });
  EXPECT_NE(m.find("titan_bad2.toml:4: figure 'memory.hbm_bytes_per_s' has no source"),
            std::string::npos)
      << m;

  m = error_of([] {
    find_chip("x", nullptr,
              write_file("titan_bad3.toml", "name = \"x\"\nbase = \"h100\"\n[memory]\n"
                                            "hbm_bytes = { value = 1, unit = \"GB/s\", source = \"s\" }\n"));
  });
  EXPECT_NE(m.find("titan_bad3.toml:4: unit 'GB/s' does not fit figure 'memory.hbm_bytes'"),
            std::string::npos)
      << m;

  m = error_of([] {
    find_chip("x", nullptr, write_file("titan_bad4.toml", "name = \"x\"\nfamily = \"mesh\"\n"));
  });
  EXPECT_NE(m.find("titan_bad4.toml:2: 'family' must be one of"), std::string::npos) << m;

  m = error_of([] {
    find_chip("x", nullptr, write_file("titan_bad5.toml", "name = \"x\"\n[compute\n"));
  });
  EXPECT_NE(m.find("titan_bad5.toml:2: "), std::string::npos) << m;  // TOML syntax error

  // A chip without the figures the simulator needs names the first missing key.
  m = error_of([] {
    find_chip("x", nullptr, write_file("titan_bad6.toml", "name = \"x\"\n"));
  });
  EXPECT_NE(m.find("titan_bad6.toml: chip 'x' needs a positive 'compute.peak_bf16_flops'"),
            std::string::npos)
      << m;

  m = error_of([] { find_chip("x", nullptr, "/nonexistent/chip.toml"); });
  EXPECT_NE(m.find("cannot read chip file '/nonexistent/chip.toml'"), std::string::npos) << m;

  m = error_of([] {
    find_chip("other", nullptr,
              write_file("titan_ok.toml", "name = \"mine\"\nbase = \"h100\"\n"));
  });
  EXPECT_NE(m.find("unknown device 'other'"), std::string::npos) << m;
  EXPECT_NE(m.find("defines 'mine'"), std::string::npos) << m;
}

TEST(ChipFile, ChipDirFollowsTheEnvironment) {
  const std::string dir = (std::filesystem::temp_directory_path() / "titan_chip_dir").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(chip_dir() + "/h100.toml", dir + "/h100.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(chip_dir() + "/_gpu.toml", dir + "/_gpu.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(chip_dir() + "/_accelerator.toml", dir + "/_accelerator.toml",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/catalog.toml") << "chips = [\"h100\"]\n";
  setenv("TITAN_CHIP_DIR", dir.c_str(), 1);
  EXPECT_EQ(chip_names(), std::vector<std::string>{"h100"});
  EXPECT_DOUBLE_EQ(find_chip("h100").peak_bf16_flops, 989e12);
  std::ofstream(dir + "/stray.toml") << "name = \"stray\"\n";
  setenv("TITAN_CHIP_DIR", (dir + "/").c_str(), 1);  // a new folder string: reloaded
  std::string m = error_of([] { chip_names(); });
  EXPECT_NE(m.find("stray.toml is not listed in"), std::string::npos) << m;
  unsetenv("TITAN_CHIP_DIR");
  EXPECT_EQ(chip_names().back(), "cpu");
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
