// Damaged checkpoint steps in one process (flipped bytes, a truncated file, a missing shard,
// no COMPLETE marker, another model): resuming skips them for the step before, asking for
// them by load_step is an error naming the step, and nothing crashes. Damaged metadata
// inside a rank file: checkpoint_damage_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "tests/trainer/checkpoint_job.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_hdf5.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {
namespace fs = std::filesystem;

// Saves steps 2 and 4; returns the directory of step 4.
std::string two_checkpoints(const std::string& dir) {
  JobConfig cfg = tiny(dir);
  Trainer t(cfg);
  Checkpointer c(t);
  t.train_step(), t.train_step();
  c.save(2, false);
  t.train_step(), t.train_step();
  c.save(4, false);
  return dir + "/ckpt/step-4";
}

// A fresh job resumes from step 2 (skipping the damaged step 4) and refuses load_step 4.
void expect_skip_and_refuse(const std::string& dir, const std::string& what) {
  {
    Trainer t(tiny(dir));
    Checkpointer c(t);
    EXPECT_EQ(c.load_at_start(), 2) << what;
  }
  Trainer t(tiny(dir, {"--checkpoint.load_step", "4"}));
  Checkpointer c(t);
  try {
    c.load_at_start();
    ADD_FAILURE() << what << ": load_step 4 should have failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime) << e.what();
    EXPECT_NE(std::string(e.what()).find("step-4"), std::string::npos) << e.what();
    std::printf("%s -> %s\n", what.c_str(), e.what());
  }
  EXPECT_EQ(t.step(), 0) << what << ": a failed load must leave the state untouched";
}

TEST(Checkpoint, FlippedBytesAreDetected) {
  const std::string dir = tmp_dir("flip");
  const std::string step4 = two_checkpoints(dir);
  const std::string file = step4 + "/rank-00000.h5";
  haddr_t offset;
  {
    h5::Handle f = h5::open_file_readonly(file);
    h5::Handle g = h5::open_group(f.get(), "optimizer/exp_avg_sq");
    h5::Handle ds = h5::open_dataset(g.get(), "layers.2.feed_forward.w2.weight");
    offset = H5Dget_offset(ds.get());
    ASSERT_NE(offset, HADDR_UNDEF);
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset + 1000);
  char b[4];
  f.read(b, 4);
  for (char& x : b) x = static_cast<char>(~x);
  f.seekp(offset + 1000);
  f.write(b, 4);
  f.close();
  expect_skip_and_refuse(dir, "flipped bytes");
}

TEST(Checkpoint, TruncatedFileIsDetected) {
  const std::string dir = tmp_dir("trunc");
  const std::string step4 = two_checkpoints(dir);
  const std::string file = step4 + "/rank-00000.h5";
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_skip_and_refuse(dir, "truncated file");
}

TEST(Checkpoint, MissingShardAndMissingMarkerAreDetected) {
  const std::string dir = tmp_dir("missing");
  const std::string step4 = two_checkpoints(dir);
  fs::remove(step4 + "/rank-00000.h5");
  expect_skip_and_refuse(dir, "missing shard");
  fs::remove_all(step4);
  const std::string step2 = dir + "/ckpt/step-2";
  fs::rename(step2 + "/COMPLETE", step2 + "/COMPLETE.off");
  Trainer t(tiny(dir));
  Checkpointer c(t);
  EXPECT_EQ(c.load_at_start(), 0) << "a step without COMPLETE must not be loaded";
}

TEST(Checkpoint, AnotherModelIsAConfigError) {
  const std::string dir = tmp_dir("other_model");
  two_checkpoints(dir);
  Trainer t(tiny(dir, {"--model.n_layers", "3"}));
  Checkpointer c(t);
  try {
    c.load_at_start();
    ADD_FAILURE() << "a checkpoint of another model must not load";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("another model: n_layers: saved 4, this job 3"), std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("dim: saved"), std::string::npos) << "only the dims that differ: " << e.what();
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
