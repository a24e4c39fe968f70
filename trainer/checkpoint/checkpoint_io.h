// The on-disk format of one titan checkpoint step (docs/checkpoint_format.md): one HDF5 file
// per saving rank with that rank's tensor pieces and metadata, and a reader that rebuilds any
// flat range of any tensor from the saved pieces (resharding), verifying block checksums.
// Used by checkpoint.cpp; knows nothing of the Trainer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace titan {

constexpr int64_t kCheckpointFormatVersion = 1;

// Elements [flat_offset, flat_offset + data.numel()) of the row-major flattened BOX
// (box_offset, box_shape) of the global tensor `name`: the box is the tensor-parallel block a
// rank holds (the whole tensor without TP or for tensors replicated over tp), the flat range
// an FSDP shard of it without its padding (the whole box when not FSDP-sharded).
struct TensorPiece {
  std::string group;  // "model", "optimizer/exp_avg", "optimizer/exp_avg_sq"
  std::string name;   // titan parameter name, e.g. "layers.0.attention.wq.weight"
  std::vector<int64_t> global_shape;
  int64_t flat_offset = 0;
  torch::Tensor data;                // 1-D, contiguous, CPU
  std::vector<int64_t> box_offset;   // empty: zeros (the whole tensor)
  std::vector<int64_t> box_shape;    // empty: global_shape
};

// Everything except tensors that one rank file records (root attributes).
struct CheckpointMeta {
  int64_t step = 0;
  int64_t rank = 0, world_size = 1;
  bool model_only = false;
  std::vector<std::string> mesh_dims;
  std::vector<int64_t> mesh_shape;
  std::string model_args_json;  // ModelArgs dims; a checkpoint of another model is refused
  std::string config_toml;      // the whole JobConfig that produced it
  // Scalar training state by name (optimizer_step, lr_scheduler_step,
  // data_consumed_sequences, ...): what the stateful parts of training_state.h record.
  std::map<std::string, int64_t> state;
  int64_t global_batch = 0, seq_len = 0;
};

// Writes one rank file (overwrites). `kill_after` >= 0 is a test hook: the process SIGKILLs
// itself after that many pieces. Returns the bytes of tensor data written.
int64_t write_rank_file(const std::string& path, const CheckpointMeta& meta,
                        const std::vector<TensorPiece>& pieces, const torch::Tensor& rng, int64_t kill_after = -1);

// fsync of a file or a directory (durability before rename / marker).
void fsync_path(const std::string& path);

// Opens every rank file of a complete step folder and indexes their pieces. Throws a runtime
// titan::Error naming the file for a missing, truncated or malformed file.
class CheckpointReader {
 public:
  // files: rank file names inside dir, in saved-rank order; sizes: their expected byte sizes
  // (from the COMPLETE marker; -1 to skip the check).
  CheckpointReader(const std::string& dir, const std::vector<std::string>& files,
                   const std::vector<int64_t>& sizes);
  ~CheckpointReader();

  const CheckpointMeta& meta() const { return meta_; }  // rank 0's file
  bool has(const std::string& group, const std::string& name) const;
  std::vector<std::string> names(const std::string& group) const;
  const std::vector<int64_t>& global_shape(const std::string& group, const std::string& name) const;

  // Elements [flat_offset, flat_offset + out.numel()) of the flattened box (box_offset,
  // box_shape; empty: the whole tensor) of group/name into `out` (1-D, any float dtype:
  // converted), whatever boxes and ranges the saving job used (resharding across FSDP and TP
  // layouts). Reads only the saved ranges that overlap, verifies their block checksums;
  // throws if an element is not covered or a checksum fails.
  void read(const std::string& group, const std::string& name, int64_t flat_offset, torch::Tensor out,
            const std::vector<int64_t>& box_offset = {}, const std::vector<int64_t>& box_shape = {});
  // The whole tensor, in its saved dtype, shaped as saved.
  torch::Tensor read_full(const std::string& group, const std::string& name);

  // RNG state saved by `rank` (empty when absent).
  torch::Tensor rng(int64_t rank);
  int64_t bytes_read() const { return bytes_read_; }

 private:
  struct Piece;
  struct File;
  std::string dir_;
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, std::vector<Piece>> index_;  // "group/name" -> pieces
  CheckpointMeta meta_;
  int64_t bytes_read_ = 0;
};

}  // namespace titan
