#include "trainer/checkpoint/safetensors_header.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace titan {

int64_t safetensors_dtype_bytes(const std::string& d) {
  static const std::map<std::string, int64_t> bytes = {{"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8},
                                                       {"I64", 8}, {"I32", 4},  {"U8", 1},  {"BOOL", 1}};
  auto it = bytes.find(d);
  return it == bytes.end() ? 0 : it->second;
}

SafetensorsHeader parse_safetensors_header(const std::string& json, int64_t data_bytes, const std::string& path) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    TITAN_FAIL(path, ": malformed safetensors header: ", e.what());
  }
  TITAN_CHECK(header.is_object(), path, ": the safetensors header is not a JSON object");
  SafetensorsHeader out;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      TITAN_CHECK(info.is_object(), path, ": __metadata__ is not an object");
      for (auto& [k, v] : info.items()) {
        TITAN_CHECK(v.is_string(), path, ": __metadata__ value of '", k, "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    TITAN_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
                where, " needs dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = name;
    TITAN_CHECK(info["dtype"].is_string(), where, ": dtype is not a string");
    e.dtype = info["dtype"].get<std::string>();
    int64_t bytes = safetensors_dtype_bytes(e.dtype);
    TITAN_CHECK(bytes > 0, where, ": unsupported safetensors dtype ", e.dtype);
    const auto& shape = info["shape"];
    TITAN_CHECK(shape.is_array(), where, ": shape is not a list");
    for (auto& d : shape) {
      TITAN_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where, ": shape holds ", d.dump(),
                  ", not a size");
      const int64_t n = d.get<int64_t>();
      // The byte size must fit in int64 (and the data), checked before anything is allocated.
      TITAN_CHECK(n == 0 || bytes <= std::numeric_limits<int64_t>::max() / n, where, ": shape ", shape.dump(),
                  " is too large");
      bytes *= n;
      e.shape.push_back(n);
    }
    const auto& offs = info["data_offsets"];
    TITAN_CHECK(offs.is_array() && offs.size() == 2 && offs[0].is_number_integer() && offs[1].is_number_integer(),
                where, ": data_offsets is not a pair of integers");
    e.begin = offs[0].get<int64_t>();
    e.end = offs[1].get<int64_t>();
    TITAN_CHECK(e.begin >= 0 && e.begin <= e.end && e.end <= data_bytes && e.end - e.begin == bytes, where,
                " has data offsets [", e.begin, ", ", e.end, ") that do not match its shape (", bytes,
                " bytes) or the file (", data_bytes, " data bytes)");
    out.tensors.push_back(std::move(e));
  }
  return out;
}

}  // namespace titan
