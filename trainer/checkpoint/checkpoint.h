// Checkpointer: saves and restores a Trainer's whole state (model and optimizer shards, step,
// LR position, data cursor, RNG, config) as HDF5 step folders (checkpoint_io.h,
// docs/checkpoint_format.md): atomic, checksummed, reshardable, optionally written by a
// background thread. Used by the train loop (trainer/train.cpp), the tests and the benchmark.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "common/model_args.h"

namespace titan {

class Trainer;

// Where this rank's piece of parameter i lies: a box of the global tensor (the tensor-parallel
// block this rank holds; the whole tensor without TP or when replicated over tp) and a range
// of that box's row-major flattening (the FSDP shard; the whole box without FSDP).
struct ParamLayout {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> box_offset, box_shape;
  int64_t tp_dim = -1;      // the dim split over tp, -1 when replicated over tp (or tp == 1)
  int64_t flat_offset = 0;  // FSDP: shard rank x shard_len (padded layout of the box)
  int64_t length = 0;       // elements of real data in this rank's piece (padding excluded)
  bool writes = true;       // false on tp ranks > 0 for tensors replicated over tp (one copy on disk)
};
// One entry per optimizer parameter, in order.
std::vector<ParamLayout> param_layout(Trainer& trainer);
// Whether this rank's tensors go to disk: replicas (dp_replicate > 0) hold copies and skip.
bool writes_tensors(Trainer& trainer);
// The full value of parameter i (a collective over the FSDP shard group and the tp group).
torch::Tensor full_parameter(Trainer& trainer, size_t i, const ParamLayout& layout);
// Copies this rank's piece (box, then flat range) of the global tensor `full` into parameter i.
void assign_from_full(Trainer& trainer, size_t i, const ParamLayout& layout, const torch::Tensor& full);

std::string model_args_json(const ModelArgs& args);

// A step folder found under the checkpoint folder.
struct StepFolder {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // has its COMPLETE marker
};
// step-N folders, newest first.
std::vector<StepFolder> list_step_folders(const std::string& folder);

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
  void commit(Staged& staged);
  bool try_load(const std::string& dir, bool model_only, bool explicit_request);
  void finalize(const Job& job);

  Trainer& trainer_;
  std::string folder_;
  std::thread writer_;
  std::exception_ptr writer_error_;
  SaveStats last_;
  std::shared_ptr<SaveStats> async_stats_;
  std::vector<torch::Tensor> host_buffers_;  // async copies, reused by the next save
  double load_s_ = 0;
  int64_t load_bytes_ = 0;
};

}  // namespace titan
