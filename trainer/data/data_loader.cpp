#include "trainer/data/data_loader.h"

#include "common/error.h"

namespace titan {

std::string default_corpus_path() { return std::string(TITAN_SOURCE_DIR) + "/trainer/data/corpus.txt"; }

DataLoader::DataLoader(std::shared_ptr<const std::vector<int64_t>> tokens, int64_t seq_len,
                       int64_t global_batch, int64_t dp_rank, int64_t dp_size)
    : tokens_(std::move(tokens)),
      seq_len_(seq_len),
      global_batch_(global_batch),
      dp_rank_(dp_rank),
      dp_size_(dp_size) {
  TITAN_CONFIG_CHECK(global_batch_ % dp_size_ == 0, "training.global_batch_size (", global_batch_,
                     ") must be divisible by the data-parallel degree (", dp_size_, ")");
  num_sequences_ = (static_cast<int64_t>(tokens_->size()) - 1) / seq_len_;
  TITAN_CONFIG_CHECK(num_sequences_ >= 1, "the dataset has ", tokens_->size(),
                     " tokens, fewer than one sequence of training.seq_len + 1 = ", seq_len_ + 1);
}

Batch DataLoader::next() {
  const int64_t rows = global_batch_ / dp_size_;
  auto buf = torch::empty({rows, seq_len_ + 1}, torch::kInt64);
  auto* out = buf.data_ptr<int64_t>();
  const int64_t* src = tokens_->data();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t seq = (consumed_ + dp_rank_ * rows + r) % num_sequences_;
    std::copy(src + seq * seq_len_, src + seq * seq_len_ + seq_len_ + 1, out + r * (seq_len_ + 1));
  }
  consumed_ += global_batch_;
  return {buf.narrow(1, 0, seq_len_).contiguous(), buf.narrow(1, 1, seq_len_).contiguous()};
}

}  // namespace titan
