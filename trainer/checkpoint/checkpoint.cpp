#include "trainer/checkpoint/checkpoint.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "common/error.h"
#include "parallel/fsdp.h"
#include "parallel/tensor_parallel.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/config/config_loader.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace fs = std::filesystem;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string rank_file(int64_t r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05lld.h5", static_cast<long long>(r));
  return buf;
}

std::string step_name(int64_t step) { return "step-" + std::to_string(step); }

// Test hook (docs/checkpoint_format.md): TITAN_CHECKPOINT_FAULT=kill_during_save:STEP makes
// rank 0 SIGKILL itself half way through writing its file for that step.
int64_t kill_after_for(int64_t step, int rank, size_t pieces) {
  const char* v = std::getenv("TITAN_CHECKPOINT_FAULT");
  if (!v || rank != 0) return -1;
  const std::string s(v), prefix = "kill_during_save:";
  if (s.rfind(prefix, 0) != 0 || std::stoll(s.substr(prefix.size())) != step) return -1;
  return static_cast<int64_t>(pieces / 2);
}

// Test hook: TITAN_CHECKPOINT_FAULT=exit_after_step:N (see after_step); -1 when unset.
int64_t exit_after_step() {
  const char* v = std::getenv("TITAN_CHECKPOINT_FAULT");
  const std::string prefix = "exit_after_step:";
  if (!v || std::string(v).rfind(prefix, 0) != 0) return -1;
  return std::stoll(std::string(v).substr(prefix.size()));
}

void world_barrier(Trainer& t) { t.world().comm()->barrier()->wait(); }

int64_t world_max(Trainer& t, int64_t v) {
  auto x = torch::tensor({double(v)}, torch::kFloat64);
  t.world().comm()->all_reduce(x, ReduceOp::kMax)->wait();
  return static_cast<int64_t>(x.item<double>());
}

void write_text_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    TITAN_CHECK(f.good(), "checkpoint: cannot write ", tmp);
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
}

// A final model-only export (its COMPLETE marker says so).
bool is_model_only(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "COMPLETE");
  nlohmann::json marker = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return marker.is_object() && marker.value("model_only", false);
}

const std::set<std::string>& loadable_parts() {
  static const std::set<std::string> s = {"model", "optimizer", "lr_scheduler", "dataloader", "train_state", "rng"};
  return s;
}

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
                      {"rope_theta", a.rope_theta},
                      {"norm_eps", a.norm_eps}};
  return j.dump();
}

// ---- where each rank's pieces lie -------------------------------------------------------

std::vector<ParamLayout> param_layout(Trainer& t) {
  TITAN_CONFIG_CHECK(t.dims().pp == 1, "checkpointing with pipeline parallelism is not implemented yet (",
                     t.dims().to_string(), "); see docs/checkpoint_format.md");
  // Global shapes come from the model built on the meta device (no memory).
  Transformer meta(t.model_args(), t.config().training.seq_len, torch::TensorOptions().device(torch::kMeta));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& p : meta->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  Communicator& tp = *t.mesh()["tp"];
  const int64_t g = t.fsdp() ? t.mesh()["fsdp"]->size() : 1, r = t.fsdp() ? t.mesh()["fsdp"]->rank() : 0;
  std::vector<ParamLayout> out;
  for (auto& p : t.optimizer().params()) {
    auto it = shapes.find(p.name);
    TITAN_CHECK(it != shapes.end(), "checkpoint: parameter ", p.name, " is not in the model");
    ParamLayout l;
    l.name = p.name;
    l.global_shape = it->second;
    l.box_offset.assign(l.global_shape.size(), 0);
    l.box_shape = l.global_shape;
    // TP (applied before FSDP): this rank holds block tp.rank() of dim tp_dim.
    l.tp_dim = tp.size() > 1 ? t.tp_shard_dim(p.name) : -1;
    if (l.tp_dim >= 0) {
      TITAN_CHECK(l.global_shape[l.tp_dim] % tp.size() == 0, "checkpoint: ", p.name, " dim ", l.tp_dim,
                  " does not divide over tp");
      l.box_shape[l.tp_dim] /= tp.size();
      l.box_offset[l.tp_dim] = tp.rank() * l.box_shape[l.tp_dim];
    }
    l.writes = l.tp_dim >= 0 || tp.rank() == 0;  // replicated over tp: tp rank 0's copy only
    int64_t numel = 1;
    for (auto s : l.box_shape) numel *= s;
    if (!t.fsdp()) {
      TITAN_CHECK(p.param.sizes().vec() == l.box_shape, "checkpoint: ", p.name, " has shape ", p.param.sizes(),
                  ", the layout expects ", c10::IntArrayRef(l.box_shape));
      l.flat_offset = 0, l.length = numel;
    } else {
      // FSDP shards the (TP-local) box flattened and padded to a multiple of the group size.
      const int64_t shard = (numel + g - 1) / g;
      TITAN_CHECK(p.param.numel() == shard, "checkpoint: ", p.name, " holds ", p.param.numel(),
                  " elements, the FSDP layout expects ", shard);
      l.flat_offset = r * shard;
      l.length = std::clamp<int64_t>(numel - l.flat_offset, 0, shard);
    }
    out.push_back(std::move(l));
  }
  return out;
}

bool writes_tensors(Trainer& t) { return !t.mesh().has("dp_replicate") || t.mesh().coordinate("dp_replicate") == 0; }

torch::Tensor full_parameter(Trainer& t, size_t i, const ParamLayout& l) {
  torch::NoGradGuard no_grad;
  auto& p = t.optimizer().params()[i].param;
  torch::Tensor box = t.fsdp() ? gather_full_parameter(*t.mesh()["fsdp"], p, l.box_shape) : p.detach().clone();
  if (l.tp_dim < 0) return box;
  return all_gather_along(box, l.tp_dim, *t.mesh()["tp"]).contiguous();
}

void assign_from_full(Trainer& t, size_t i, const ParamLayout& l, const torch::Tensor& full) {
  torch::NoGradGuard no_grad;
  auto& p = t.optimizer().params()[i].param;
  auto box = full.view(l.global_shape);
  for (size_t d = 0; d < l.box_shape.size(); ++d) box = box.narrow(d, l.box_offset[d], l.box_shape[d]);
  auto flat = box.contiguous().reshape({-1}).to(p.scalar_type());
  p.view({-1}).narrow(0, 0, l.length).copy_(flat.narrow(0, l.flat_offset, l.length));
}

std::vector<StepFolder> list_step_folders(const std::string& folder) {
  std::vector<StepFolder> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory()) continue;
    const std::string num = name.substr(5);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) continue;
    out.push_back({std::stoll(num), e.path().string(), fs::exists(e.path() / "COMPLETE", ec)});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step > b.step; });
  return out;
}

// ---- saving -----------------------------------------------------------------------------

// What the writer needs; owns host copies in async mode, so training may go on.
struct Checkpointer::Job {
  int64_t step = 0;
  int rank = 0, world = 1;
  std::string folder, tmp_dir;
  CheckpointMeta meta;
  std::vector<TensorPiece> pieces;
  torch::Tensor rng;
  int64_t kill_after = -1;
  int64_t keep_latest_k = 0;
  double timeout_s = 600;
};

Checkpointer::Checkpointer(Trainer& trainer) : trainer_(trainer) {
  const auto& c = trainer_.config().checkpoint;
  folder_ = fs::path(c.folder).is_absolute() ? c.folder : (fs::path(trainer_.config().job.dump_folder) / c.folder).string();
  TITAN_CONFIG_CHECK(c.async_mode == "disabled" || c.async_mode == "async",
                     "checkpoint.async_mode must be disabled or async, got ", c.async_mode);
  TITAN_CONFIG_CHECK(c.interval > 0, "checkpoint.interval must be positive, got ", c.interval);
  for (auto& part : c.exclude_from_loading) {
    TITAN_CONFIG_CHECK(loadable_parts().count(part), "checkpoint.exclude_from_loading: unknown part '", part,
                       "' (model, optimizer, lr_scheduler, dataloader, train_state, rng)");
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
    std::rethrow_exception(e);
  }
}

bool Checkpointer::after_step(int64_t step, int64_t last_step) {
  if (!enabled()) return false;
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
  job->folder = folder_;
  job->tmp_dir = (fs::path(folder_) / (".tmp-" + step_name(step))).string();
  job->keep_latest_k = c.keep_latest_k;
  job->timeout_s = std::max(60.0, trainer_.config().comm.train_timeout_seconds * 6);
  if (job->rank == 0) {  // a stale temporary folder is a save that was killed: start over
    fs::remove_all(job->tmp_dir);
    fs::create_directories(job->tmp_dir);
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
  m.optimizer_step = trainer_.optimizer().step_count();
  m.lr_scheduler_step = trainer_.step();
  m.data_consumed_sequences = trainer_.loader().consumed_sequences();
  m.global_batch = trainer_.tokens_per_step() / trainer_.config().training.seq_len;
  m.seq_len = trainer_.config().training.seq_len;

  const bool async = c.async_mode == "async";
  const auto layout = param_layout(trainer_);
  auto& params = trainer_.optimizer().params();
  auto& states = trainer_.optimizer().states();
  const auto export_dtype = dtype_named(c.export_dtype);
  if (writes_tensors(trainer_)) {
    // Sync: views of the live tensors (training waits). Async: host copies taken now.
    auto piece = [&](const char* group, size_t i, const torch::Tensor& t, bool convert) {
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
    for (size_t i = 0; i < params.size(); ++i) piece("model", i, params[i].param, model_only);
    if (!model_only) {
      for (size_t i = 0; i < params.size(); ++i) piece("optimizer/exp_avg", i, states[i].exp_avg, false);
      for (size_t i = 0; i < params.size(); ++i) piece("optimizer/exp_avg_sq", i, states[i].exp_avg_sq, false);
    }
  }
  if (!model_only) job->rng = at::detail::getDefaultCPUGenerator().get_state().clone();
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
      finalize(*job);
    } else {  // tells rank 0 that this rank's file is durable, and its size
      const fs::path f = fs::path(job->tmp_dir) / rank_file(job->rank);
      write_text_durably(f.string() + ".done", std::to_string(fs::file_size(f)) + "\n");
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
                static_cast<long long>(step), model_only ? "model-only (" : "", model_only ? (c.export_dtype + ")").c_str() : "",
                (fs::path(folder_) / step_name(step)).string().c_str(), last_.bytes / 1e6, last_.stall_s);
    std::fflush(stdout);
  }
}

// Rank 0, after its own file: waits until every rank's file is durable (each rank leaves a
// ".done" file holding its size; no collective, so this may run on the writer thread), then
// renames the folder, writes the COMPLETE marker and prunes old steps.
void Checkpointer::finalize(const Job& job) {
  const double deadline = now_s() + job.timeout_s;
  std::vector<int64_t> sizes(job.world, -1);
  std::vector<std::string> files;
  // Rank 0's own file is durable now; others report through their done files.
  {
    const std::string path = (fs::path(job.tmp_dir) / rank_file(0)).string();
    sizes[0] = static_cast<int64_t>(fs::file_size(path));
  }
  for (int r = 0; r < job.world; ++r) files.push_back(rank_file(r));
  for (int r = 1; r < job.world; ++r) {
    const fs::path done = fs::path(job.tmp_dir) / (rank_file(r) + ".done");
    std::error_code ec;
    while (!fs::exists(done, ec)) {
      TITAN_CHECK(now_s() < deadline, "checkpoint: rank ", r, " did not finish its file for step ", job.step,
                  " within ", job.timeout_s, " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream f(done);
    f >> sizes[r];
    TITAN_CHECK(f && sizes[r] >= 0, "checkpoint: unreadable ", done.string());
    fs::remove(done);
  }
  std::error_code ec;
  if (fs::exists(fs::path(job.tmp_dir) / "model.safetensors", ec)) files.push_back("model.safetensors");
  fsync_path(job.tmp_dir);
  const fs::path final_dir = fs::path(job.folder) / step_name(job.step);
  fs::remove_all(final_dir);  // an older save of the same step (a re-run) is replaced
  fs::rename(job.tmp_dir, final_dir);
  fsync_path(job.folder);
  nlohmann::json marker = {{"format", "titan-checkpoint"},
                           {"format_version", kCheckpointFormatVersion},
                           {"step", job.step},
                           {"world_size", job.world},
                           {"model_only", job.meta.model_only},
                           {"rank_files", std::vector<std::string>(files.begin(), files.begin() + job.world)},
                           {"rank_file_bytes", sizes},
                           {"extra_files", std::vector<std::string>(files.begin() + job.world, files.end())}};
  write_text_durably((final_dir / "COMPLETE").string(), marker.dump(1) + "\n");
  fsync_path(final_dir.string());
  if (job.keep_latest_k > 0) {  // prune the oldest full checkpoints beyond k (0 keeps all)
    int64_t kept = 0;
    for (auto& s : list_step_folders(job.folder)) {
      if (!s.complete || is_model_only(s.path)) continue;  // exports are neither counted nor pruned
      if (++kept > job.keep_latest_k) fs::remove_all(s.path);
    }
  }
}

// ---- loading ----------------------------------------------------------------------------

// A checkpoint read into staging tensors, not yet applied.
struct Checkpointer::Staged {
  CheckpointMeta meta;
  bool model_only = false, load_model = false, load_optim = false;
  std::set<std::string> skip;
  std::vector<torch::Tensor> p_new, m_new, v_new;
  torch::Tensor rng;
};

void Checkpointer::load(const std::string& dir, bool model_only) { try_load(dir, model_only, true); }

std::unique_ptr<Checkpointer::Staged> Checkpointer::stage(const std::string& dir, bool model_only) {
  auto st = std::make_unique<Staged>();
  std::ifstream f(fs::path(dir) / "COMPLETE");
  TITAN_CHECK(f.good(), dir, ": no COMPLETE marker (the save did not finish)");
  nlohmann::json marker;
  try {
    f >> marker;
  } catch (const std::exception& e) {
    TITAN_FAIL(dir, "/COMPLETE is malformed: ", e.what());
  }
  const double t0 = now_s();
  const auto files = marker.at("rank_files").get<std::vector<std::string>>();
  const auto sizes = marker.at("rank_file_bytes").get<std::vector<int64_t>>();
  CheckpointReader reader(dir, files, sizes);
  const CheckpointMeta& m = reader.meta();
  const std::string mine = model_args_json(trainer_.model_args());
  TITAN_CONFIG_CHECK(m.model_args_json == mine, dir, " is a checkpoint of another model: saved ", m.model_args_json,
                     ", this job ", mine);
  model_only = model_only || m.model_only;
  std::set<std::string> skip(trainer_.config().checkpoint.exclude_from_loading.begin(),
                             trainer_.config().checkpoint.exclude_from_loading.end());
  // Everything is read into staging tensors first: a damaged checkpoint leaves the live
  // state untouched, so the caller can fall back to an older one.
  const auto layout = param_layout(trainer_);
  auto& params = trainer_.optimizer().params();
  auto& states = trainer_.optimizer().states();
  std::vector<torch::Tensor> p_new, m_new, v_new;
  auto stage = [&](const char* group, size_t i, const torch::Tensor& like) {
    const auto& l = layout[i];
    TITAN_CHECK(reader.has(group, l.name), dir, ": has no ", group, "/", l.name);
    TITAN_CONFIG_CHECK(reader.global_shape(group, l.name) == l.global_shape, dir, ": ", l.name,
                       " has another shape than this model's");
    auto t = torch::zeros({like.numel()}, like.options().requires_grad(false));
    reader.read(group, l.name, l.flat_offset, t.narrow(0, 0, l.length), l.box_offset, l.box_shape);
    return t;
  };
  const bool load_model = !skip.count("model");
  const bool load_optim = !model_only && !skip.count("optimizer");
  for (size_t i = 0; i < params.size(); ++i) {
    if (load_model) p_new.push_back(stage("model", i, params[i].param));
    if (load_optim) {
      m_new.push_back(stage("optimizer/exp_avg", i, states[i].exp_avg));
      v_new.push_back(stage("optimizer/exp_avg_sq", i, states[i].exp_avg_sq));
    }
  }
  torch::Tensor rng;
  if (!model_only && !skip.count("rng")) {
    // Same world size: each rank its own stream; otherwise rank 0's (documented).
    const int64_t r = m.world_size == trainer_.world().size() ? trainer_.world().rank() : 0;
    rng = reader.rng(r);
  }
  load_bytes_ = reader.bytes_read();
  st->meta = m;
  st->model_only = model_only, st->load_model = load_model, st->load_optim = load_optim;
  st->skip = skip;
  st->p_new = std::move(p_new), st->m_new = std::move(m_new), st->v_new = std::move(v_new);
  st->rng = rng;
  load_s_ = now_s() - t0;
  return st;
}

void Checkpointer::commit(Staged& st) {
  torch::NoGradGuard no_grad;
  auto& params = trainer_.optimizer().params();
  auto& states = trainer_.optimizer().states();
  for (size_t i = 0; i < st.p_new.size(); ++i) params[i].param.view({-1}).copy_(st.p_new[i]);
  for (size_t i = 0; i < st.m_new.size(); ++i) {
    states[i].exp_avg.view({-1}).copy_(st.m_new[i]);
    states[i].exp_avg_sq.view({-1}).copy_(st.v_new[i]);
  }
  if (st.load_optim) trainer_.optimizer().set_step_count(st.meta.optimizer_step);
  if (!st.model_only) {
    if (!st.skip.count("train_state") || !st.skip.count("lr_scheduler")) trainer_.set_step(st.meta.lr_scheduler_step);
    if (!st.skip.count("dataloader")) trainer_.loader().set_consumed_sequences(st.meta.data_consumed_sequences);
    if (st.rng.defined()) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(st.rng);
    }
  }
}

// Every rank tries; the outcome is agreed over the world so that all skip or all commit.
bool Checkpointer::try_load(const std::string& dir, bool model_only, bool explicit_request) {
  int64_t status = 0;  // 0 ok, 1 damaged, 2 config error
  std::string message;
  std::unique_ptr<Staged> staged;
  try {
    staged = stage(dir, model_only);
  } catch (const Error& e) {
    status = e.kind() == ErrorKind::kConfig ? 2 : 1;
    message = std::string(e.what()) + " [" + e.where() + "]";
  } catch (const std::exception& e) {
    status = 1;
    message = e.what();
  }
  const int64_t worst = world_max(trainer_, status);
  if (status != 0) {
    std::fprintf(stderr, "titan: checkpoint: rank %d: %s: %s\n", trainer_.world().rank(), dir.c_str(), message.c_str());
  }
  if (worst == 2) TITAN_CONFIG_CHECK(false, "cannot load checkpoint ", dir, ": ", message.empty() ? "see the message of another rank" : message);
  if (worst == 1) {
    TITAN_CHECK(!explicit_request, "checkpoint ", dir, " was requested explicitly (checkpoint.load_step or a path) but is damaged or incomplete: ",
                message.empty() ? "see the message of another rank" : message);
    if (trainer_.is_writer()) std::fprintf(stderr, "titan: checkpoint: WARNING skipping damaged checkpoint %s\n", dir.c_str());
    return false;
  }
  commit(*staged);  // every rank read its part without error
  return true;
}

int64_t Checkpointer::load_at_start() {
  const auto& c = trainer_.config().checkpoint;
  const bool writer = trainer_.is_writer();
  auto announce = [&](const std::string& what, const std::string& dir) {
    if (writer) {
      std::printf("titan: checkpoint: %s %s (step %lld, %.2f s, %.1f MB read by rank 0)\n", what.c_str(), dir.c_str(),
                  static_cast<long long>(trainer_.step()), load_s_, load_bytes_ / 1e6);
      std::fflush(stdout);
    }
  };
  if (enabled()) {
    if (c.load_step >= 0) {
      const std::string dir = (fs::path(folder_) / step_name(c.load_step)).string();
      TITAN_CONFIG_CHECK(fs::is_directory(dir), "checkpoint.load_step = ", c.load_step, ": ", dir, " does not exist");
      try_load(dir, false, true);
      announce("resumed from", dir);
      return trainer_.step();
    }
    std::error_code ec;
    if (fs::is_directory(folder_, ec) && writer) {
      for (auto& e : fs::directory_iterator(folder_, ec)) {
        if (e.path().filename().string().rfind(".tmp-", 0) == 0)
          std::fprintf(stderr, "titan: checkpoint: WARNING ignoring unfinished save %s\n", e.path().string().c_str());
      }
    }
    for (auto& s : list_step_folders(folder_)) {
      if (!s.complete) {
        if (writer) std::fprintf(stderr, "titan: checkpoint: WARNING skipping incomplete checkpoint %s (no COMPLETE marker)\n", s.path.c_str());
        continue;
      }
      // A model-only step > 0 is a final export, not a training state to resume.
      if (s.step > 0 && is_model_only(s.path)) continue;
      if (try_load(s.path, false, false)) {
        announce("resumed from", s.path);
        return trainer_.step();
      }
    }
  }
  if (!c.initial_load_path.empty()) {
    const std::string& p = c.initial_load_path;
    if (fs::exists(fs::path(p) / "COMPLETE")) {
      try_load(p, c.initial_load_model_only, true);
    } else {
      load_hf(trainer_, p);
      load_s_ = 0;
    }
    announce("initial weights from", p);
    return trainer_.step();
  }
  return 0;
}

}  // namespace titan
