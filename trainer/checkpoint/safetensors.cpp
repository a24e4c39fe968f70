#include "trainer/checkpoint/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/checkpoint/safetensors_header.h"

namespace titan {
namespace {

const std::map<torch::ScalarType, std::string>& dtype_names() {
  static const std::map<torch::ScalarType, std::string> m = {
      {torch::kFloat32, "F32"}, {torch::kBFloat16, "BF16"}, {torch::kFloat16, "F16"},
      {torch::kFloat64, "F64"}, {torch::kInt64, "I64"},     {torch::kInt32, "I32"},
      {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"}};
  return m;
}

torch::ScalarType dtype_from_name(const std::string& n, const std::string& path) {
  for (auto& [t, name] : dtype_names()) {
    if (name == n) return t;
  }
  TITAN_FAIL(path, ": unsupported safetensors dtype ", n);
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    auto it = dtype_names().find(c.scalar_type());
    TITAN_CHECK(it != dtype_names().end(), path, ": cannot save tensor ", name, " of dtype ",
                c.scalar_type());
    header[name] = {{"dtype", it->second},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + static_cast<int64_t>(c.nbytes())}}};
    offset += c.nbytes();
    data.push_back(c);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TITAN_CHECK(out.good(), "cannot write ", path);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), h.size());
  for (auto& c : data) out.write(static_cast<const char*>(c.data_ptr()), c.nbytes());
  out.flush();
  TITAN_CHECK(out.good(), "writing ", path, " failed (disk full?)");
}

TensorMap load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  // A FIFO given as checkpoint.initial_load_path blocked the open for good (SIGTERM is only
  // noted before training): the sizes below need a regular file anyway.
  std::error_code ec;
  TITAN_CONFIG_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec), path,
                     ": not a regular file (a safetensors file or a checkpoint folder is needed)");
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "cannot read ", path);
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  in.seekg(0);
  uint64_t n = 0;
  TITAN_CHECK(file_size >= 8 && in.read(reinterpret_cast<char*>(&n), 8), path,
              ": too short to be a safetensors file");
  TITAN_CHECK(n <= static_cast<uint64_t>(file_size - 8), path, ": header length ", n,
              " exceeds the file size ", file_size);
  std::string h(n, '\0');
  in.read(h.data(), n);
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  // Every entry is checked against the file before a tensor is allocated.
  const SafetensorsHeader header = parse_safetensors_header(h, file_size - data_start, path);
  if (metadata) *metadata = header.metadata;
  TensorMap out;
  for (const SafetensorsEntry& e : header.tensors) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype_from_name(e.dtype, path)));
    in.seekg(data_start + e.begin);
    in.read(static_cast<char*>(t.data_ptr()), t.nbytes());
    TITAN_CHECK(in.good(), path, ": cannot read the data of tensor ", e.name);
    out[e.name] = t;
  }
  return out;
}

}  // namespace titan
