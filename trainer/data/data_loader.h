// Packs a token stream into sequences of seq_len + 1 tokens and hands each data-parallel rank
// its rows of every global batch. Used by the train loop; its state (a global cursor) goes into
// checkpoints and maps onto any data-parallel size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace titan {

// The corpus shipped with the repository (training.dataset_path = "").
std::string default_corpus_path();

struct Batch {
  torch::Tensor inputs;  // [rows, seq_len] int64
  torch::Tensor labels;  // [rows, seq_len] int64: inputs shifted by one token
};

class DataLoader {
 public:
  // Sequence i covers tokens [i * seq_len, i * seq_len + seq_len]; the stream wraps around.
  DataLoader(std::shared_ptr<const std::vector<int64_t>> tokens, int64_t seq_len,
             int64_t global_batch, int64_t dp_rank, int64_t dp_size);

  // This rank's rows of the next global batch: [global_batch / dp_size, seq_len].
  Batch next();

  // Sequences consumed by all ranks together; the same on every rank, so a job with another
  // data-parallel size resumes at the same place in the stream.
  int64_t consumed_sequences() const { return consumed_; }
  void set_consumed_sequences(int64_t c) { consumed_ = c; }
  int64_t sequences_per_epoch() const { return num_sequences_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> tokens_;
  int64_t seq_len_, global_batch_, dp_rank_, dp_size_;
  int64_t num_sequences_;
  int64_t consumed_ = 0;
};

}  // namespace titan
