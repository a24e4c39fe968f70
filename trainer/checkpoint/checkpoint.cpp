#include "trainer/checkpoint/checkpoint.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "common/error.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/fault_hooks.h"
#include "trainer/config/config_loader.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/checkpoint/step_folders.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void world_barrier(Trainer& t) { t.world().comm()->barrier()->wait(); }

}  // namespace

std::string model_args_json(const ModelArgs& a) {
  nlohmann::json j = {{"name", a.name},
                      {"dim", a.dim},
                      {"n_layers", a.n_layers},
                      {"n_heads", a.n_heads},
                      {"n_kv_heads", a.n_kv_heads},
                      {"head_dim", a.head_dim},
                      {"ffn_dim", a.ffn_dim},
                      {"vocab_size", a.vocab_size},
                      {"tie_embeddings", a.tie_embeddings},
                      {"qk_norm", a.qk_norm},
                      {"mlp_activation", to_string(a.mlp_activation)},
                      {"rope_theta", a.rope_theta},
                      {"norm_eps", a.norm_eps}};
  return j.dump();
}

// What the writer needs; owns host copies in async mode, so training may go on.
struct Checkpointer::Job {
  int64_t step = 0;
  int rank = 0, world = 1;
  std::string tmp_dir;
  CheckpointMeta meta;
  std::vector<TensorPiece> pieces;
  torch::Tensor rng;
  int64_t kill_after = -1;
  StepCommit commit;
};

Checkpointer::Checkpointer(Trainer& trainer) : trainer_(trainer), parts_(training_state(trainer)) {
  const auto& c = trainer_.config().checkpoint;
  folder_ = fs::path(c.folder).is_absolute() ? c.folder : (fs::path(trainer_.config().job.dump_folder) / c.folder).string();
  TITAN_CONFIG_CHECK(c.interval > 0, "checkpoint.interval must be positive, got ", c.interval);
  if (c.enable || c.create_seed_checkpoint) {
    check_folder_writable(folder_, trainer_.world().rank());
    if (trainer_.world().rank() == 0) lock_checkpoint_folder(folder_);
  }
  std::string names;
  for (auto& p : parts_) names += (names.empty() ? "" : ", ") + p.name;
  for (auto& part : c.exclude_from_loading) {
    bool known = false;
    for (auto& p : parts_) known = known || p.name == part;
    TITAN_CONFIG_CHECK(known, "checkpoint.exclude_from_loading: unknown part '", part, "' (", names, ")");
  }
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan: checkpoint: async save failed: %s\n", e.what());
  }
}

bool Checkpointer::enabled() const { return trainer_.config().checkpoint.enable; }

void Checkpointer::wait() {
  if (writer_.joinable()) writer_.join();
  if (async_stats_) {
    last_.total_s = async_stats_->total_s;
    async_stats_.reset();
  }
  if (writer_error_) {
    auto e = writer_error_;
    writer_error_ = nullptr;
    writer_failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(e);
  }
}

bool Checkpointer::after_step(int64_t step, int64_t last_step) {
  if (!enabled()) return false;
  if (writer_failed_.load(std::memory_order_acquire)) wait();  // rethrows the background save's error
  const auto& c = trainer_.config().checkpoint;
  if (step == last_step) {
    save(step, c.last_save_model_only);
    wait();  // the job ends here: the last checkpoint must be complete
  } else if (step == exit_after_step()) {
    // Test hook: end here as a preempted job would, after a complete full save of this step;
    // the LR schedule (a function of training.steps) is the one of the whole run.
    save(step, false);
    wait();
    if (trainer_.is_writer()) {
      std::printf("titan: checkpoint: exit_after_step:%lld: stopping after the save\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
    return true;
  } else if (step % c.interval == 0) {
    save(step, false);
  }
  return false;
}

bool Checkpointer::create_seed_checkpoint() {
  if (!trainer_.config().checkpoint.create_seed_checkpoint) return false;
  save(0, false);
  wait();
  return true;
}

void Checkpointer::save(int64_t step, bool model_only) {
  wait();  // the previous save must finish first (one in flight)
  const double t0 = now_s();
  const auto& c = trainer_.config().checkpoint;
  auto job = std::make_shared<Job>();
  job->step = step;
  job->rank = trainer_.world().rank();
  job->world = trainer_.world().size();
  job->tmp_dir = (fs::path(folder_) / (".tmp-" + step_name(step))).string();
  job->commit = {step, job->world, folder_, job->tmp_dir, model_only, c.keep_latest_k,
                 std::max(60.0, trainer_.config().comm.train_timeout_seconds * 6)};
  if (job->rank == 0) {  // a stale temporary folder is a save that was killed: start over
    std::error_code ec;
    fs::remove_all(job->tmp_dir, ec);
    if (!ec) fs::create_directories(job->tmp_dir, ec);
    if (ec) {  // the folder was writable at start (check_folder_writable): it changed since
      std::string newest = "none";
      for (auto& f : list_step_folders(folder_)) {  // newest first
        if (f.complete) {
          newest = f.path;
          break;
        }
      }
      TITAN_CHECK(false, "checkpoint: cannot start the save of step ", step, ": ", job->tmp_dir, ": ", ec.message(),
                  " (", folder_, " was writable at start); the newest complete checkpoint is ", newest);
    }
  }
  world_barrier(trainer_);

  CheckpointMeta& m = job->meta;
  m.step = step;
  m.rank = job->rank;
  m.world_size = job->world;
  m.model_only = model_only;
  m.mesh_dims = trainer_.mesh().dim_names();
  m.mesh_shape = trainer_.mesh().shape();
  m.model_args_json = model_args_json(trainer_.model_args());
  m.config_toml = config_to_toml(trainer_.config());
  m.global_batch = trainer_.tokens_per_step() / trainer_.config().training.seq_len;
  m.seq_len = trainer_.config().training.seq_len;

  const bool async = c.async_mode == AsyncMode::kAsync;
  const auto layout = param_layout(trainer_);
  const auto export_dtype = scalar_type(c.export_dtype);
  const bool writes = writes_tensors(trainer_);
  // Sync: views of the live tensors (training waits). Async: host copies taken now.
  auto piece = [&](const std::string& group, size_t i, const torch::Tensor& t, bool convert) {
    if (!layout[i].writes) return;  // replicated over tp: written by tp rank 0 only
    auto v = t.detach().reshape({-1}).narrow(0, 0, layout[i].length);
    if (convert && v.scalar_type() != export_dtype) {
      v = v.to(export_dtype);
    } else if (async) {
      // Host buffers are kept across saves (one save in flight, so reuse is safe): no
      // page faults on fresh memory in the stall after the first save.
      const size_t k = job->pieces.size();
      if (host_buffers_.size() <= k) host_buffers_.resize(k + 1);
      auto& b = host_buffers_[k];
      if (!b.defined() || b.numel() != v.numel() || b.scalar_type() != v.scalar_type()) b = torch::empty_like(v);
      v = b.copy_(v);
    }
    const auto& l = layout[i];
    job->pieces.push_back({group, l.name, l.global_shape, l.flat_offset, v.contiguous(), l.box_offset, l.box_shape});
  };
  SaveSink sink{m,
                [&](const std::string& group, const std::vector<torch::Tensor>& per_param, bool exportable) {
                  if (!writes) return;  // replicas (dp_replicate > 0) hold copies
                  for (size_t i = 0; i < per_param.size(); ++i) piece(group, i, per_param[i], exportable && model_only);
                },
                &job->rng,
                [&](const std::string& group, const std::string& name, const torch::Tensor& t) {
                  auto v = t.detach().reshape({-1}).to(torch::kCPU).clone();  // small: a copy in sync mode too
                  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
                  job->pieces.push_back({group, name, shape, 0, v, {}, {}});
                }};
  for (auto& part : parts_) {
    if (!model_only || part.model_only) part.save(sink);
  }
  job->kill_after = kill_after_for(step, job->rank, job->pieces.size());
  if (model_only) {  // the Hugging Face export travels with the final weights (collective)
    export_hf(trainer_, (fs::path(job->tmp_dir) / "model.safetensors").string(), export_dtype);
  }

  last_ = SaveStats{step, 0, 0, 0};
  for (auto& p : job->pieces) last_.bytes += p.data.nbytes();
  auto run = [job, this, t0](SaveStats* stats) {
    write_rank_file((fs::path(job->tmp_dir) / rank_file(job->rank)).string(), job->meta, job->pieces, job->rng,
                    job->kill_after);
    job->pieces.clear();  // frees the host copies early
    if (job->rank == 0) {
      commit_step_folder(job->commit);
    } else {  // tells rank 0 that this rank's file is durable, and its size
      mark_rank_file_done(job->tmp_dir, job->rank);
    }
    if (stats) {
      stats->total_s = now_s() - t0;
      if (job->rank == 0) {
        std::printf("titan: checkpoint: step %lld complete after %.3f s (background write)\n",
                    static_cast<long long>(job->step), stats->total_s);
        std::fflush(stdout);
      }
    }
  };
  if (async) {
    async_stats_ = std::make_shared<SaveStats>();
    auto stats = async_stats_;
    writer_ = std::thread([this, run, stats] {
      try {
        run(stats.get());
      } catch (...) {
        writer_error_ = std::current_exception();
        writer_failed_.store(true, std::memory_order_release);
      }
    });
    last_.stall_s = now_s() - t0;
  } else {
    run(nullptr);
    world_barrier(trainer_);  // complete (renamed and marked) on return, on every rank
    last_.stall_s = last_.total_s = now_s() - t0;
  }
  if (job->rank == 0) {
    std::printf("titan: checkpoint: step %lld %s%s to %s: %.1f MB per rank, training blocked %.3f s\n",
                static_cast<long long>(step), model_only ? "model-only (" : "", model_only ? (to_string(c.export_dtype) + ")").c_str() : "",
                (fs::path(folder_) / step_name(step)).string().c_str(), last_.bytes / 1e6, last_.stall_s);
    std::fflush(stdout);
  }
}

}  // namespace titan
