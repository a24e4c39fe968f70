// Checkpointer: saves and restores a Trainer's whole state (the stateful parts of
// training_state.h, plus the config) as HDF5 step folders (checkpoint_io.h,
// docs/checkpoint_format.md): atomic, checksummed, reshardable, optionally written by a
// background thread. Save here, load in checkpoint_load.cpp. Used by the train loop
// (trainer/train.cpp), the tests and the benchmark.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "common/model_args.h"
#include "trainer/checkpoint/step_folders.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/step/param_layout.h"

namespace titan {

class Trainer;

std::string model_args_json(const ModelArgs& args);

class Checkpointer {
 public:
  explicit Checkpointer(Trainer& trainer);
  ~Checkpointer();  // finishes an async save in flight

  bool enabled() const;
  // dump_folder / checkpoint.folder (or checkpoint.folder when absolute).
  const std::string& folder() const { return folder_; }

  // At start (every rank): checkpoint.load_step, else the newest usable checkpoint in folder(),
  // else initial_load_path (titan step folder or Hugging Face safetensors file/folder).
  // Returns the step training resumes from (0 when starting fresh). Damaged checkpoints are
  // skipped with a warning naming them, or an error when load_step names them.
  int64_t load_at_start();

  // After optimizer step `step`: saves every `interval` steps and at `last_step` (model only
  // with export_dtype there when last_save_model_only). create_seed_checkpoint is handled
  // by the caller saving step 0. Returns true when the job must stop after this step: the
  // test hook TITAN_CHECKPOINT_FAULT=exit_after_step:N (a full save of step N, then the job
  // ends as if preempted, the LR schedule still spanning training.steps).
  bool after_step(int64_t step, int64_t last_step);

  // checkpoint.create_seed_checkpoint: saves step 0 (the initial state) and returns true;
  // the caller then ends the job without training.
  bool create_seed_checkpoint();

  // Saves the current state as step `step` (every rank calls it). model_only: weights in
  // export_dtype plus a Hugging Face model.safetensors.
  void save(int64_t step, bool model_only);
  // Waits for the async save in flight; rethrows its error.
  void wait();

  // Loads one complete step folder (every rank); throws on any problem.
  void load(const std::string& step_dir, bool model_only);

  struct SaveStats {
    int64_t step = -1;
    double stall_s = 0;   // time the training loop was blocked in save()
    double total_s = 0;   // until the checkpoint was complete (async: measured by the writer)
    int64_t bytes = 0;    // tensor bytes this rank wrote
  };
  SaveStats last_save() const { return last_; }
  double last_load_seconds() const { return load_s_; }
  int64_t last_load_bytes() const { return load_bytes_; }

 private:
  struct Job;
  struct Staged;
  std::unique_ptr<Staged> stage(const std::string& dir, bool model_only);
  bool try_load(const std::string& dir, bool model_only, bool explicit_request);
  void finish_interrupted_commits_everywhere();

  Trainer& trainer_;
  std::vector<StatefulPart> parts_;
  std::string folder_;
  std::thread writer_;
  std::exception_ptr writer_error_;
  // Set by the writer when its save failed: after_step() reports it at the next step end
  // instead of at the next save, which may be checkpoint.interval steps (hours) later.
  std::atomic<bool> writer_failed_{false};
  SaveStats last_;
  std::shared_ptr<SaveStats> async_stats_;
  std::vector<torch::Tensor> host_buffers_;  // async copies, reused by the next save
  double load_s_ = 0;
  int64_t load_bytes_ = 0;
};

}  // namespace titan
