// The checkpoint folder is checked for writing at start (Checkpointer's constructor), so a bad
// checkpoint.folder fails before training, naming the folder, rather than at the first save.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "trainer/checkpoint/step_folders.h"

namespace titan {
namespace {
namespace fs = std::filesystem;

TEST(CheckpointFolder, UnwritableFolderIsAConfigErrorNamingIt) {
  const fs::path base = fs::temp_directory_path() / "titan_ckpt_folder_test";
  fs::remove_all(base);
  fs::create_directories(base);
  std::ofstream(base / "a_file") << "x";
  struct Case {
    std::string folder, expected;
  };
  // Root ignores permission bits, so the cases are ones no user can write to.
  const std::vector<Case> cases = {
      {(base / "a_file" / "ckpt").string(), "checkpoint.folder " + (base / "a_file" / "ckpt").string() + ": cannot be created"},
      {(base / "a_file").string(), "checkpoint.folder " + (base / "a_file").string() + ": "},
      {"/proc/titan_ckpt", "checkpoint.folder /proc/titan_ckpt: cannot be created"},
  };
  for (const auto& c : cases) {
    try {
      check_folder_writable(c.folder, 0);
      ADD_FAILURE() << "no error for " << c.folder;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
  // A writable folder is created and left without the probe file.
  const fs::path ok = base / "ok" / "ckpt";
  check_folder_writable(ok.string(), 3);
  EXPECT_TRUE(fs::is_directory(ok));
  EXPECT_TRUE(fs::is_empty(ok));
  fs::remove_all(base);
}

// Folders a user or another tool left next to titan's steps are neither loaded nor pruned,
// and do not stop the job (a step number past int64 ended it with std::stoll's bare "stoll").
TEST(CheckpointFolder, EntriesThatAreNotStepsAreSkipped) {
  const fs::path base = fs::temp_directory_path() / "titan_ckpt_folder_entries";
  fs::remove_all(base);
  for (const char* d : {"step-2", "step-10", "step-abc", "step--3", "step-", "step-99999999999999999999", "steps-4"})
    fs::create_directories(base / d);
  std::ofstream(base / "step-2" / "COMPLETE") << "{}";
  std::ofstream(base / "step-9") << "a file";
  const auto steps = list_step_folders(base.string());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 10);
  EXPECT_FALSE(steps[0].complete);
  EXPECT_EQ(steps[1].step, 2);
  EXPECT_TRUE(steps[1].complete);
  fs::remove_all(base);
}

}  // namespace
}  // namespace titan
