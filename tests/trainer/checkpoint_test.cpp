// Checkpoints in one process: save/load round trip with exact continuation, the reader
// resharding across TP boxes and FSDP ranges, h5py reads what titan wrote, keep_latest_k with
// a final model-only export, async equals sync. Damaged steps: checkpoint_damaged_step_test.cpp;
// Hugging Face export/import: checkpoint_hf_test.cpp. Multi-process resume tests live in
// checkpoint_resume.py (mpi_tests.cmake).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "tests/error_of.h"
#include "tests/trainer/checkpoint_job.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/checkpoint/step_folders.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {
namespace fs = std::filesystem;

void expect_same_state(Trainer& a, Trainer& b) {
  auto& pa = a.optimizer().params();
  auto& pb = b.optimizer().params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i].param, pb[i].param)) << pa[i].name;
    EXPECT_TRUE(torch::equal(a.optimizer().states()[i].exp_avg, b.optimizer().states()[i].exp_avg)) << pa[i].name;
    EXPECT_TRUE(torch::equal(a.optimizer().states()[i].exp_avg_sq, b.optimizer().states()[i].exp_avg_sq));
  }
  EXPECT_EQ(a.step(), b.step());
  EXPECT_EQ(a.optimizer().step_count(), b.optimizer().step_count());
  EXPECT_EQ(a.loader().consumed_sequences(), b.loader().consumed_sequences());
}

TEST(Checkpoint, SaveLoadRoundTripAndExactContinuation) {
  const std::string dir = tmp_dir("roundtrip");
  JobConfig cfg = tiny(dir);
  Trainer a(cfg);
  for (int i = 0; i < 3; ++i) a.train_step();
  Checkpointer ca(a);
  ca.save(3, false);
  ASSERT_TRUE(fs::exists(dir + "/ckpt/step-3/COMPLETE"));
  ASSERT_TRUE(fs::exists(dir + "/ckpt/step-3/rank-00000.h5"));

  Trainer b(cfg);
  Checkpointer cb(b);
  EXPECT_EQ(cb.load_at_start(), 3);
  expect_same_state(a, b);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.train_step().loss, b.train_step().loss) << "step " << 4 + i;
}

// Pieces of `full` as a job with tp blocks on `tp_dim` (-1: none) and FSDP `g` would hold them.
std::vector<TensorPiece> pieces_of(const torch::Tensor& full, int64_t tp, int64_t tp_dim, int64_t g) {
  std::vector<TensorPiece> out;
  for (int64_t t = 0; t < (tp_dim < 0 ? 1 : tp); ++t) {
    std::vector<int64_t> off(full.dim(), 0), shape = full.sizes().vec();
    if (tp_dim >= 0) shape[tp_dim] /= tp, off[tp_dim] = t * shape[tp_dim];
    auto box = full;
    for (int64_t d = 0; d < full.dim(); ++d) box = box.narrow(d, off[d], shape[d]);
    auto flat = box.contiguous().reshape({-1});
    const int64_t shard = (flat.numel() + g - 1) / g;
    for (int64_t r = 0; r < g; ++r) {
      const int64_t a = std::min(r * shard, flat.numel()), b = std::min((r + 1) * shard, flat.numel());
      out.push_back({"model", "w", full.sizes().vec(), a, flat.narrow(0, a, b - a).clone(), off, shape});
    }
  }
  return out;
}

// One rank file per piece (as the saving ranks would), opened by a reader.
std::unique_ptr<CheckpointReader> write_pieces(const std::string& step, const std::vector<TensorPiece>& pieces) {
  fs::create_directories(step);
  CheckpointMeta meta;
  meta.mesh_dims = {"world"}, meta.mesh_shape = {int64_t(pieces.size())}, meta.world_size = int64_t(pieces.size());
  std::vector<std::string> files;
  for (size_t r = 0; r < pieces.size(); ++r) {
    files.push_back("rank-" + std::to_string(r) + ".h5");
    meta.rank = int64_t(r);
    write_rank_file(step + "/" + files.back(), meta, {pieces[r]}, {});
  }
  return std::make_unique<CheckpointReader>(step, files, std::vector<int64_t>(files.size(), -1));
}

// The reader rebuilds any (tp box, FSDP range) of a tensor from pieces saved under any other
// such layout: row-wise and column-wise TP blocks, uneven FSDP shards (padding), whole tensor.
TEST(Checkpoint, ReaderReshardsAcrossTensorParallelBoxes) {
  const std::string dir = tmp_dir("boxes");
  auto full = torch::arange(6 * 10, torch::kFloat32).reshape({6, 10});
  struct Layout {
    int64_t tp, dim, g;
  };
  const std::vector<Layout> layouts = {{1, -1, 1}, {1, -1, 4}, {2, 0, 3}, {2, 1, 3}, {2, 1, 1}, {2, 0, 2}};
  for (auto& saved : layouts) {
    const std::string step = dir + "/s" + std::to_string(saved.tp) + "_" + std::to_string(saved.dim) + "_" +
                             std::to_string(saved.g);
    auto reader = write_pieces(step, pieces_of(full, saved.tp, saved.dim, saved.g));
    EXPECT_TRUE(torch::equal(reader->read_full("model", "w"), full));
    for (auto& want : layouts) {
      for (auto& p : pieces_of(full, want.tp, want.dim, want.g)) {
        auto got = torch::full({p.data.numel()}, -1.0f);
        reader->read("model", "w", p.flat_offset, got, p.box_offset, p.box_shape);
        EXPECT_TRUE(torch::equal(got, p.data))
            << "saved tp " << saved.tp << " dim " << saved.dim << " fsdp " << saved.g << " -> tp " << want.tp
            << " dim " << want.dim << " fsdp " << want.g << " box " << c10::IntArrayRef(p.box_offset) << " flat "
            << p.flat_offset;
      }
    }
  }
  // A box with a block missing from the saved pieces is an error naming the gap.
  auto pieces = pieces_of(full, 2, 1, 1);
  pieces.pop_back();
  auto reader = write_pieces(dir + "/partial", pieces);
  auto out = torch::empty({60});
  EXPECT_THROW(reader->read("model", "w", 0, out), Error);
}

TEST(Checkpoint, H5pyReadsTheTrainersValue) {
  const std::string dir = tmp_dir("h5py");
  JobConfig cfg = tiny(dir);
  Trainer t(cfg);
  t.train_step();
  Checkpointer c(t);
  c.save(1, false);
  const std::string name = "layers.1.attention.wq.weight";
  const std::string out = dir + "/wq.bin";
  const std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) + "/tests/reference/h5_read.py " +
                          dir + "/ckpt/step-1/rank-00000.h5 model/" + name + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  torch::Tensor expected;
  for (auto& p : t.optimizer().params())
    if (p.name == name) expected = p.param.detach().reshape({-1});
  ASSERT_TRUE(expected.defined());
  std::ifstream f(out, std::ios::binary);
  auto got = torch::empty_like(expected);
  f.read(static_cast<char*>(got.data_ptr()), got.nbytes());
  ASSERT_TRUE(f.good());
  EXPECT_TRUE(torch::equal(got, expected));
}

TEST(Checkpoint, KeepLatestKPrunesAndLastSaveIsModelOnlyExport) {
  const std::string dir = tmp_dir("prune");
  JobConfig cfg = tiny(dir, {"--checkpoint.interval", "1", "--checkpoint.keep_latest_k", "2",
                             "--checkpoint.last_save_model_only", "true", "--checkpoint.export_dtype", "bfloat16"});
  Trainer t(cfg);
  Checkpointer c(t);
  for (int64_t s = 1; s <= 5; ++s) {
    t.train_step();
    c.after_step(s, 5);
  }
  std::vector<int64_t> steps;
  for (auto& s : list_step_folders(dir + "/ckpt")) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{5, 4, 3})) << "k=2 full checkpoints plus the final export";
  const std::string last = dir + "/ckpt/step-5";
  EXPECT_TRUE(fs::exists(last + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(last + "/config.json"));
  auto hf = load_safetensors(last + "/model.safetensors");
  EXPECT_EQ(hf.at("model.layers.0.self_attn.q_proj.weight").scalar_type(), torch::kBFloat16);
  // Resume skips the export and takes step 4; the export loads as initial weights.
  Trainer r(cfg);
  Checkpointer cr(r);
  EXPECT_EQ(cr.load_at_start(), 4);
  // Asked for by load_step, the export restarted at step 0 and overwrote step 3 and 4 later.
  Trainer e(tiny(dir, {"--checkpoint.load_step", "5"}));
  Checkpointer ce(e);
  const std::string m = error_of([&] { ce.load_at_start(); }, ErrorKind::kConfig);
  EXPECT_NE(m.find("checkpoint.load_step = 5: " + last + " is a final model-only export"), std::string::npos) << m;
  EXPECT_NE(m.find("The newest full checkpoint here is step-4"), std::string::npos) << m;
  EXPECT_NE(m.find("--checkpoint.initial_load_path " + last), std::string::npos) << m;
  // Dropping the step count on resume restarted at 0 and overwrote step 3 and 4 later.
  Trainer x(tiny(dir, {"--checkpoint.exclude_from_loading", "train_state,lr_scheduler"}));
  Checkpointer cx(x);
  const std::string mx = error_of([&] { cx.load_at_start(); }, ErrorKind::kConfig);
  EXPECT_NE(mx.find("so resuming " + dir + "/ckpt/step-4 restarts at step 0"), std::string::npos) << mx;
  EXPECT_NE(mx.find("(up to step 4)"), std::string::npos) << mx;
  Trainer w(tiny(tmp_dir("prune_init"), {"--checkpoint.initial_load_path", last}));
  Checkpointer cw(w);
  EXPECT_EQ(cw.load_at_start(), 0);
  auto& p = w.optimizer().params()[0];
  EXPECT_TRUE(torch::equal(p.param, t.optimizer().params()[0].param.to(torch::kBFloat16).to(torch::kFloat32)));
}

TEST(Checkpoint, AsyncSaveWritesTheStateOfItsStep) {
  const std::string dir_s = tmp_dir("sync"), dir_a = tmp_dir("async");
  Trainer s(tiny(dir_s)), a(tiny(dir_a, {"--checkpoint.async_mode", "async"}));
  Checkpointer cs(s), ca(a);
  for (int64_t step = 1; step <= 4; ++step) {
    s.train_step(), a.train_step();
    if (step % 2 == 0) cs.save(step, false), ca.save(step, false);  // async: training goes on
  }
  // The next step would update the state in place while the background write runs; whether it
  // gets there first is a race, so the state is overwritten right away instead: the write of
  // step 4 must still hold step 4's values (the host copies taken at save). An async save
  // writing the live tensors (no copies) passed the loop's checks alone 3 times of 3.
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a.optimizer().params().size(); ++i) {
      a.optimizer().params()[i].param.detach().fill_(NAN);
      a.optimizer().states()[i].exp_avg.fill_(NAN);
      a.optimizer().states()[i].exp_avg_sq.fill_(NAN);
    }
  }
  ca.wait();
  for (int64_t step : {2, 4}) {
    CheckpointReader rs(dir_s + "/ckpt/step-" + std::to_string(step), {"rank-00000.h5"}, {-1});
    CheckpointReader ra(dir_a + "/ckpt/step-" + std::to_string(step), {"rank-00000.h5"}, {-1});
    for (const char* g : {"model", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
      for (auto& n : rs.names(g)) EXPECT_TRUE(torch::equal(rs.read_full(g, n), ra.read_full(g, n))) << g << "/" << n;
    }
    EXPECT_EQ(ra.meta().state.at("data_consumed_sequences"), rs.meta().state.at("data_consumed_sequences"));
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
