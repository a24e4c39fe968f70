// Loading checkpoints: resume discovery at start, staged reads (nothing changes until every
// rank read its part), and the world-wide agreement to commit or skip.
#include "trainer/checkpoint/checkpoint.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "common/error.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/checkpoint/step_folders.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace fs = std::filesystem;
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t world_max(Trainer& t, int64_t v) {
  auto x = torch::tensor({double(v)}, torch::kFloat64);
  t.world().comm()->all_reduce(x, ReduceOp::kMax)->wait();
  return static_cast<int64_t>(x.item<double>());
}

// "n_layers: saved 1, this job 3; ..." for the dims that differ; the whole records when the
// saved one cannot be read as JSON. A vocabulary that differs only by padding gets the way on:
// an unset model.vocab_size follows the tensor-parallel degree (vocab_size_divisible_by x tp).
std::string model_difference(const std::string& saved, const std::string& mine, const ModelSection& asked) {
  const nlohmann::json a = nlohmann::json::parse(saved, nullptr, false), b = nlohmann::json::parse(mine, nullptr, false);
  if (!a.is_object() || !b.is_object()) return "saved " + saved + ", this job " + mine;
  std::string out;
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string was = a.contains(it.key()) ? a[it.key()].dump() : std::string("(none)");
    if (was == it.value().dump()) continue;
    out += (out.empty() ? "" : "; ") + it.key() + ": saved " + was + ", this job " + it.value().dump();
  }
  if (a.contains("vocab_size") && a["vocab_size"] != b["vocab_size"] && asked.vocab_size == 0) {
    out += " (this job pads the tokenizer's vocabulary to a multiple of model.vocab_size_divisible_by x "
           "tensor_parallel_degree; a layout with another tensor-parallel degree loads it with model.vocab_size = " +
           a["vocab_size"].dump() + " when that divides by its degree)";
  }
  return out.empty() ? "saved " + saved + ", this job " + mine : out;
}

// Checkpoints written before model.mlp_activation existed hold SwiGLU models and lack the key:
// the saved metadata with it added, so that they load into a SwiGLU model as before.
std::string with_mlp_activation(const std::string& saved) {
  nlohmann::json j = nlohmann::json::parse(saved, nullptr, false);
  if (!j.is_object() || j.contains("mlp_activation")) return saved;
  j["mlp_activation"] = to_string(MlpActivation::kSwiglu);
  return j.dump();
}

}  // namespace

// A checkpoint read into staging tensors, not yet applied.
struct Checkpointer::Staged {
  std::vector<std::function<void()>> apply;  // one per loaded part
};

void Checkpointer::load(const std::string& dir, bool model_only) { try_load(dir, model_only, true); }

std::unique_ptr<Checkpointer::Staged> Checkpointer::stage(const std::string& dir, bool model_only) {
  auto st = std::make_unique<Staged>();
  const double t0 = now_s();
  const CompleteMarker marker = read_complete_marker(dir);
  CheckpointReader reader(dir, marker.rank_files, marker.rank_file_bytes);
  const CheckpointMeta& m = reader.meta();
  const std::string mine = model_args_json(trainer_.model_args()), saved = with_mlp_activation(m.model_args_json);
  TITAN_CONFIG_CHECK(saved == mine, dir, " is a checkpoint of another model: ",
                     model_difference(saved, mine, trainer_.config().model));
  model_only = model_only || m.model_only;
  std::set<std::string> skip(trainer_.config().checkpoint.exclude_from_loading.begin(),
                             trainer_.config().checkpoint.exclude_from_loading.end());
  // Everything is read into staging tensors first: a damaged checkpoint leaves the live
  // state untouched, so the caller can fall back to an older one.
  const auto layout = param_layout(trainer_);
  LoadSource source{m,
                    [&](const std::string& group, const std::vector<torch::Tensor>& like) {
                      std::vector<torch::Tensor> out;
                      for (size_t i = 0; i < like.size(); ++i) {
                        const auto& l = layout[i];
                        TITAN_CHECK(reader.has(group, l.name), dir, ": has no ", group, "/", l.name);
                        TITAN_CONFIG_CHECK(reader.global_shape(group, l.name) == l.global_shape, dir, ": ", l.name,
                                           " has another shape than this model's");
                        auto t = torch::zeros({like[i].numel()}, like[i].options().requires_grad(false));
                        reader.read(group, l.name, l.flat_offset, t.narrow(0, 0, l.length), l.box_offset,
                                    l.box_shape);
                        out.push_back(t);
                      }
                      return out;
                    },
                    [&] {
                      // Same world size: each rank its own stream; otherwise rank 0's (documented).
                      const int64_t r = m.world_size == trainer_.world().size() ? trainer_.world().rank() : 0;
                      return reader.rng(r);
                    },
                    [&](const std::string& group, const std::string& name, const torch::Tensor& like) {
                      if (!reader.has(group, name)) return torch::Tensor();
                      TITAN_CONFIG_CHECK(reader.global_shape(group, name) == like.sizes().vec(), dir, ": ", group, "/",
                                         name, " has another shape than this model's");
                      auto t = torch::zeros({like.numel()}, like.options().requires_grad(false));
                      reader.read(group, name, 0, t);
                      return t;
                    }};
  for (auto& part : parts_) {
    if (skip.count(part.name) || (model_only && !part.model_only)) continue;
    st->apply.push_back(part.stage(source));
  }
  load_bytes_ = reader.bytes_read();
  load_s_ = now_s() - t0;
  return st;
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
  for (auto& apply : staged->apply) apply();  // every rank read its part without error
  return true;
}

// Rank 0 commits every save, so rank 0 finishes a commit cut short (step_folders.h) before
// any rank lists the folder; a failure there is every rank's error, not a hang at the next
// collective.
void Checkpointer::finish_interrupted_commits_everywhere() {
  std::vector<std::string> finished;
  std::string message;
  if (trainer_.world().rank() == 0) {
    try {
      finished = finish_interrupted_commits(folder_);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  const bool failed = world_max(trainer_, message.empty() ? 0 : 1) != 0;
  TITAN_CHECK(!failed, "checkpoint: cannot finish an interrupted save in ", folder_, ": ",
              message.empty() ? "see rank 0's message" : message);
  for (auto& dir : finished) {
    std::printf("titan: checkpoint: finished the save of %s that a stop had cut short after its marker\n", dir.c_str());
    std::fflush(stdout);
  }
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
  // A resume that drops the step count (exclude_from_loading holds both train_state and
  // lr_scheduler) restarted at step 0 in this folder and silently replaced its checkpoints
  // with the new run's steps 1, 2, ...
  auto resumed = [&](const std::string& dir, int64_t saved_step) {
    TITAN_CONFIG_CHECK(trainer_.step() >= saved_step, "checkpoint.exclude_from_loading leaves out the step count "
                       "(train_state and lr_scheduler), so resuming ", dir, " restarts at step ", trainer_.step(),
                       " in ", folder_, ", whose checkpoints (up to step ", saved_step, ") its saves would overwrite. "
                       "Start the new run in another checkpoint.folder, from --checkpoint.initial_load_path ", dir,
                       " --checkpoint.initial_load_model_only false");
    announce("resumed from", dir);
    return trainer_.step();
  };
  if (enabled()) {
    finish_interrupted_commits_everywhere();
    if (c.load_step >= 0) {
      const std::string dir = (fs::path(folder_) / step_name(c.load_step)).string();
      TITAN_CONFIG_CHECK(fs::is_directory(dir), "checkpoint.load_step = ", c.load_step, ": ", dir, " does not exist");
      // A final export holds weights only: "resuming" it restarted at step 0 with a fresh optimizer
      // and, saving into this folder, silently replaced its full checkpoints (step-2 of a run saved
      // at 2 and exported at 4 was overwritten by the new run's step 2).
      if (c.load_step > 0 && is_model_only(dir)) {
        std::string full;
        for (auto& s : list_step_folders(folder_))
          if (full.empty() && s.complete && !is_model_only(s.path)) full = step_name(s.step);
        TITAN_CONFIG_FAIL("checkpoint.load_step = ", c.load_step, ": ", dir,
                          " is a final model-only export (weights only: no optimizer, data or step state); resuming "
                          "it would restart at step 0 and overwrite this folder's checkpoints. ",
                          full.empty() ? std::string("This folder holds no full checkpoint to resume. ")
                                       : "The newest full checkpoint here is " + full + ". ",
                          "To go on from the export's weights with a fresh optimizer, pass "
                          "--checkpoint.initial_load_path ", dir, " with another checkpoint.folder");
      }
      try_load(dir, false, true);
      return resumed(dir, c.load_step);
    }
    std::error_code ec;
    if (fs::is_directory(folder_, ec) && writer) {
      for (auto& e : fs::directory_iterator(folder_, ec)) {
        if (e.path().filename().string().rfind(".tmp-", 0) == 0)
          std::fprintf(stderr, "titan: checkpoint: WARNING ignoring unfinished save %s\n", e.path().string().c_str());
      }
    }
    std::string export_dir;  // the newest final model-only export passed over, if any
    for (auto& s : list_step_folders(folder_)) {
      if (!s.complete) {
        if (writer) std::fprintf(stderr, "titan: checkpoint: WARNING skipping incomplete checkpoint %s (no COMPLETE marker)\n", s.path.c_str());
        continue;
      }
      // A model-only step > 0 is a final export: it holds no optimizer, data or RNG state.
      if (s.step > 0 && is_model_only(s.path)) {
        if (export_dir.empty()) export_dir = s.path;
        continue;
      }
      if (try_load(s.path, false, false)) {
        if (!export_dir.empty() && writer) {
          std::printf("titan: checkpoint: %s is a final model-only export (no training state); resuming the full "
                      "state of %s instead, the steps after it run again\n",
                      export_dir.c_str(), s.path.c_str());
        }
        return resumed(s.path, s.step);
      }
    }
    // Starting from step 1 over a finished run would hide that run and overwrite its export.
    TITAN_CONFIG_CHECK(export_dir.empty() || !c.initial_load_path.empty(), folder_,
                       " holds a finished run: its last save ", export_dir,
                       " is model-only (checkpoint.last_save_model_only) and no full checkpoint is left to resume "
                       "the optimizer and data state from. To go on from its weights with a fresh optimizer, pass "
                       "--checkpoint.initial_load_path ",
                       export_dir, " with another checkpoint.folder; to start over, use another checkpoint.folder. "
                       "Runs meant to be extended: checkpoint.last_save_model_only = false");
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
