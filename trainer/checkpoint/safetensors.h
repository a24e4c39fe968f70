// Reading and writing the safetensors format (8-byte header length, JSON header, raw
// little-endian data): weight exchange with Hugging Face and with the PyTorch reference.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

namespace titan {

using TensorMap = std::map<std::string, torch::Tensor>;

// Writes every tensor (made contiguous, on CPU); metadata goes into "__metadata__".
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor; errors name the file and what is malformed.
TensorMap load_safetensors(const std::string& path,
                           std::map<std::string, std::string>* metadata = nullptr);

}  // namespace titan
