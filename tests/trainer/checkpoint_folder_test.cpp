// The checkpoint folder is checked for writing at start (Checkpointer's constructor), so a bad
// checkpoint.folder fails before training, naming the folder, rather than at the first save.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "trainer/checkpoint/step_folders.h"

namespace titan {
namespace TITAN_UNIT_ID {
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

// Sets or clears the immutable flag (chattr +i): the one way to make a removal fail as root.
bool set_immutable(const fs::path& p, bool on) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  ok = ok && ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  ::close(fd);
  return ok;
}

void write_step(const fs::path& dir, bool complete) {
  fs::create_directories(dir);
  std::ofstream(dir / rank_file(0)) << "rank file";
  if (complete)
    std::ofstream(dir / "COMPLETE") << R"({"model_only": false, "rank_files": ["rank-00000.h5"], "rank_file_bytes": [9]})";
}

// keep_latest_k pruning that cannot remove an old step ended the run (filesystem_error, exit 1)
// after the new step was already committed. Now a warning; and a step whose rank file could
// not be removed has lost its marker first, so it is never loaded without its rank file.
TEST(CheckpointFolder, PruningThatFailsWarnsAndNeverLeavesACompleteStepWithoutItsFiles) {
  const fs::path base = fs::temp_directory_path() / "titan_ckpt_prune_fails";
  fs::remove_all(base);
  write_step(base / "step-1", true);
  write_step(base / "step-2", true);
  if (!set_immutable(base / "step-1", true) || !set_immutable(base / "step-2" / rank_file(0), true)) {
    set_immutable(base / "step-1", false);
    fs::remove_all(base);
    GTEST_SKIP() << "cannot set the immutable flag here (needs root and a file system that has it)";
  }
  write_step(base / ".tmp-step-3", false);
  StepCommit job;
  job.step = 3;
  job.folder = base.string();
  job.tmp_dir = (base / ".tmp-step-3").string();
  job.keep_latest_k = 1;
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(commit_step_folder(job));
  const std::string err = testing::internal::GetCapturedStderr();
  set_immutable(base / "step-1", false);
  set_immutable(base / "step-2" / rank_file(0), false);
  const auto steps = list_step_folders(base.string());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].step, 3);
  EXPECT_TRUE(steps[0].complete);
  EXPECT_FALSE(steps[1].complete);  // step-2: its marker went first, its rank file stayed
  EXPECT_TRUE(fs::exists(base / "step-2" / rank_file(0)));
  EXPECT_TRUE(steps[2].complete);   // step-1: nothing in it could go, so it is still whole
  EXPECT_NE(err.find("cannot remove old checkpoint " + (base / "step-1").string()), std::string::npos) << err;
  EXPECT_NE(err.find("it stays loadable"), std::string::npos) << err;
  EXPECT_NE(err.find("cannot remove old checkpoint " + (base / "step-2").string()), std::string::npos) << err;
  EXPECT_NE(err.find("no longer loaded"), std::string::npos) << err;
  fs::remove_all(base);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Re-saving a step that exists (a run resumed from an earlier load_step) removed the old
// step-N before renaming the new save in; stopped between the two (a kill, or here a file
// that will not go), neither save was left loadable. Now the new save's marker is written
// first, and the next start puts it in place.
TEST(CheckpointFolder, AReplacedStepCutShortIsFinishedAtTheNextStart) {
  const fs::path base = fs::temp_directory_path() / "titan_ckpt_replace_cut";
  fs::remove_all(base);
  write_step(base / "step-3", true);
  fs::create_directories(base / ".tmp-step-3");
  std::ofstream(base / ".tmp-step-3" / rank_file(0)) << "the new save's rank file";
  if (!set_immutable(base / "step-3" / rank_file(0), true)) {
    fs::remove_all(base);
    GTEST_SKIP() << "cannot set the immutable flag here (needs root and a file system that has it)";
  }
  StepCommit job;
  job.step = 3;
  job.folder = base.string();
  job.tmp_dir = (base / ".tmp-step-3").string();
  EXPECT_ANY_THROW(commit_step_folder(job));
  set_immutable(base / "step-3" / rank_file(0), false);
  ASSERT_TRUE(fs::exists(base / ".tmp-step-3" / "COMPLETE"));

  // Saves that never reached their marker, or whose files do not match it, are not put in place.
  fs::create_directories(base / ".tmp-step-4");
  std::ofstream(base / ".tmp-step-4" / rank_file(0)) << "unfinished";
  write_step(base / ".tmp-step-5", true);
  std::ofstream(base / ".tmp-step-5" / rank_file(0), std::ios::app) << " cut";  // 13 bytes, marker says 9

  const auto finished = finish_interrupted_commits(base.string());
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], (base / "step-3").string());
  EXPECT_FALSE(fs::exists(base / ".tmp-step-3"));
  EXPECT_EQ(read_file(base / "step-3" / rank_file(0)), "the new save's rank file");
  const auto steps = list_step_folders(base.string());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].complete);
  EXPECT_EQ(remove_unfinished_saves(base.string()), 2);
  EXPECT_FALSE(fs::exists(base / ".tmp-step-4"));
  EXPECT_FALSE(fs::exists(base / ".tmp-step-5"));
  fs::remove_all(base);
}

// Two jobs on one checkpoint folder (the same command started twice) overwrote each other's
// step folders without a word. A second process is refused at start, naming the holder; the
// same process may take the lock again; it is free once the holder is gone.
TEST(CheckpointFolder, ASecondJobOnTheSameFolderIsRefused) {
  const fs::path base = fs::temp_directory_path() / "titan_ckpt_lock";
  fs::remove_all(base);
  fs::create_directories(base);
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the other job: takes the lock, says so, holds it until told to go
    char c = 0;
    try {
      lock_checkpoint_folder(base.string());
      c = 'y';
    } catch (...) {
      c = 'n';
    }
    (void)!::write(to_parent[1], &c, 1);
    (void)!::read(to_child[0], &c, 1);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  try {
    lock_checkpoint_folder(base.string());
    ADD_FAILURE() << "a second process got the lock";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint.folder " + base.string() + " is in use by another job (pid " +
                        std::to_string(child) + " on "),
              std::string::npos)
        << what;
  }
  (void)!::write(to_child[1], "x", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NO_THROW(lock_checkpoint_folder(base.string()));  // the holder is gone
  EXPECT_NO_THROW(lock_checkpoint_folder(base.string()));  // again, by the same process
  fs::remove_all(base);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
