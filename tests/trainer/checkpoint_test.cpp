// Checkpoints in one process: save/load round trip, h5py reads what titan wrote, damaged
// checkpoints (truncated, flipped bytes, missing shard, no marker, another model) are skipped
// or refused without a crash, keep_latest_k, async equals sync, Hugging Face export/import and
// the PyTorch reference's loss on the exported weights. Multi-process resume tests live in
// checkpoint_resume.py (mpi_tests.cmake).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_hdf5.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/config/config_loader.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/step/trainer.h"
#include "tests/error_of.h"

namespace titan {
namespace {
namespace fs = std::filesystem;

std::string tmp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("titan_ckpt_test_" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

JobConfig tiny(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", dir, "--training.seq_len", "32",
                                   "--training.local_batch_size", "4", "--training.steps", "20",
                                   "--metrics.peak_flops", "1e11", "--checkpoint.enable", "true",
                                   "--checkpoint.folder", dir + "/ckpt", "--checkpoint.interval", "1000",
                                   "--checkpoint.last_save_model_only", "false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

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

TEST(Checkpoint, HuggingFaceExportImportRoundTripIsExact) {
  const std::string dir = tmp_dir("hf");
  Trainer t(tiny(dir));
  t.train_step(), t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  auto hf = load_safetensors(dir + "/model.safetensors");
  for (const char* n : {"model.embed_tokens.weight", "model.layers.3.self_attn.k_norm.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.post_attention_layernorm.weight",
                        "model.norm.weight", "lm_head.weight"})
    EXPECT_TRUE(hf.count(n)) << n;
  EXPECT_EQ(hf.size(), t.optimizer().params().size());
  Trainer u(tiny(tmp_dir("hf_load"), {"--checkpoint.initial_load_path", dir}));
  Checkpointer c(u);
  c.load_at_start();
  for (size_t i = 0; i < t.optimizer().params().size(); ++i)
    EXPECT_TRUE(torch::equal(t.optimizer().params()[i].param, u.optimizer().params()[i].param));
  // Tied embeddings: no lm_head in the export, and it imports back.
  ModelArgs tied = t.model_args();
  tied.tie_embeddings = true;
  TensorMap titan_t;
  Transformer m(tied, 8, torch::TensorOptions());
  m->init_weights(3);
  for (auto& p : m->named_parameters()) titan_t[p.key()] = p.value().detach();
  auto hf_t = to_hf(titan_t, torch::kFloat32);
  EXPECT_FALSE(hf_t.count("lm_head.weight"));
  auto back = from_hf(hf_t, tied);
  for (auto& [k, v] : titan_t) EXPECT_TRUE(torch::equal(back.at(k), v)) << k;
}

// A non-gated MLP (model.mlp_activation = gelu) exports w1 / w2 as up_proj / down_proj with no
// gate_proj, imports back exactly under the same activation, and neither kind of MLP takes the
// other's export or titan checkpoint.
TEST(Checkpoint, NonGatedMlpExportsUpAndDownProjections) {
  const std::string dir = tmp_dir("hf_gelu");
  const std::vector<std::string> gelu = {"--model.mlp_activation", "gelu"};
  Trainer t(tiny(dir, gelu));
  t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  auto hf = load_safetensors(dir + "/model.safetensors");
  EXPECT_TRUE(hf.count("model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(hf.count("model.layers.0.mlp.down_proj.weight"));
  EXPECT_FALSE(hf.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(hf.size(), t.optimizer().params().size());
  EXPECT_TRUE(torch::equal(hf.at("model.layers.1.mlp.up_proj.weight"),
                           t.model()->layers[1]->feed_forward->w1->weight.detach()));
  nlohmann::json config;
  std::ifstream(dir + "/config.json") >> config;
  EXPECT_EQ(config["hidden_act"], "gelu_pytorch_tanh");
  EXPECT_EQ(config["mlp_gated"], false);

  std::vector<std::string> load = gelu;
  load.insert(load.end(), {"--checkpoint.initial_load_path", dir});
  Trainer u(tiny(tmp_dir("hf_gelu_load"), load));
  Checkpointer(u).load_at_start();
  for (size_t i = 0; i < t.optimizer().params().size(); ++i)
    EXPECT_TRUE(torch::equal(t.optimizer().params()[i].param, u.optimizer().params()[i].param));

  Trainer s(tiny(tmp_dir("hf_gelu_into_swiglu"), {"--checkpoint.initial_load_path", dir}));
  EXPECT_NE(error_of([&] { Checkpointer(s).load_at_start(); }, ErrorKind::kConfig)
                .find("mlp.gate_proj.weight is missing (a non-gated MLP's checkpoint? model.mlp_activation is swiglu)"),
            std::string::npos);
  // A SwiGLU export's up_proj has w1's shape: its gate_proj is what refuses it.
  TensorMap swiglu_t;
  for (auto& p : s.model()->named_parameters()) swiglu_t[p.key()] = p.value().detach();
  EXPECT_NE(error_of([&] { from_hf(to_hf(swiglu_t, torch::kFloat32), t.model_args()); }, ErrorKind::kConfig)
                .find("is the gate of a gated (SwiGLU) MLP, but model.mlp_activation = gelu is non-gated"),
            std::string::npos);

  Checkpointer(t).save(1, false);
  Trainer w(tiny(dir));
  EXPECT_NE(error_of([&] { Checkpointer(w).load_at_start(); }, ErrorKind::kConfig)
                .find("another model: mlp_activation: saved \"gelu\", this job \"swiglu\""),
            std::string::npos);
}

TEST(Checkpoint, PyTorchReferenceComputesTheSameLossOnExportedWeights) {
  const std::string dir = tmp_dir("hf_ref");
  Trainer t(tiny(dir));
  for (int i = 0; i < 3; ++i) t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  torch::manual_seed(1);
  const ModelArgs& a = t.model_args();
  auto inputs = torch::randint(0, a.vocab_size, {2, 32}, torch::kInt64);
  auto labels = torch::randint(0, a.vocab_size, {2, 32}, torch::kInt64);
  double titan_loss;
  {
    torch::NoGradGuard ng;
    titan_loss = cross_entropy_sum(t.model()->forward(inputs), labels, 64.0).item<double>();
  }
  nlohmann::json cfg = {{"n_layers", a.n_layers}, {"head_dim", a.head_dim}, {"norm_eps", a.norm_eps},
                        {"rope_theta", a.rope_theta}, {"qk_norm", a.qk_norm}};
  save_safetensors(dir + "/batch.safetensors", {{"inputs", inputs}, {"labels", labels}}, {{"config", cfg.dump()}});
  const std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) + "/tests/reference/hf_loss.py " +
                          dir + "/model.safetensors " + dir + "/batch.safetensors " + dir + "/loss.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  double ref = 0;
  std::ifstream(dir + "/loss.txt") >> ref;
  std::printf("titan loss %.10f, PyTorch reference on exported HF weights %.10f\n", titan_loss, ref);
  EXPECT_NEAR(titan_loss, ref, 1e-5 * std::abs(ref));
}

}  // namespace
}  // namespace titan
