// The safetensors header (JSON after the 8-byte length) parsed and checked before any tensor
// is allocated: names, dtypes, shapes and data offsets. No torch here, so the libFuzzer target
// (tests/trainer/fuzz/safetensors_fuzz.cpp) builds it alone. Used by safetensors.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace titan {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "BF16", ... (safetensors' names)
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets into the data after the header
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Bytes per element of a safetensors dtype name; 0 when titan does not read that dtype.
int64_t safetensors_dtype_bytes(const std::string& dtype);

// Parses `json` and checks every entry against `data_bytes` (the bytes after the header):
// known dtype, non-negative shape whose byte size does not overflow, offsets inside the data
// and matching the shape. Any problem is a titan::Error naming `path` and the tensor.
SafetensorsHeader parse_safetensors_header(const std::string& json, int64_t data_bytes, const std::string& path);

}  // namespace titan
