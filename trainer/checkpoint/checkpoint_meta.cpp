#include "trainer/checkpoint/checkpoint_meta.h"

#include "common/error.h"

namespace titan {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

void write_checkpoint_meta(hid_t file, const CheckpointMeta& m) {
  h5::set_attr(file, "format", std::string("titan-checkpoint"));
  h5::set_attr(file, "format_version", kCheckpointFormatVersion);
  h5::set_attr(file, "step", m.step);
  h5::set_attr(file, "rank", m.rank);
  h5::set_attr(file, "world_size", m.world_size);
  h5::set_attr(file, "model_only", int64_t(m.model_only));
  h5::set_attr(file, "mesh_dims", join(m.mesh_dims));
  h5::set_attr(file, "mesh_shape", m.mesh_shape);
  h5::set_attr(file, "model_args", m.model_args_json);
  h5::set_attr(file, "config_toml", m.config_toml);
  std::vector<std::string> keys;
  for (auto& [k, v] : m.state) {
    h5::set_attr(file, k, v);
    keys.push_back(k);
  }
  h5::set_attr(file, "state_keys", join(keys));
  h5::set_attr(file, "global_batch", m.global_batch);
  h5::set_attr(file, "seq_len", m.seq_len);
}

CheckpointMeta read_checkpoint_meta(hid_t file, const std::string& path) {
  TITAN_CHECK(h5::has_attr(file, "format") && h5::attr_string(file, "format") == "titan-checkpoint", path,
              ": not a titan checkpoint file");
  const int64_t v = h5::attr_int(file, "format_version");
  TITAN_CHECK(v == kCheckpointFormatVersion, path, ": checkpoint format version ", v, ", this build reads ",
              kCheckpointFormatVersion);
  CheckpointMeta m;
  m.step = h5::attr_int(file, "step");
  m.rank = h5::attr_int(file, "rank");
  m.world_size = h5::attr_int(file, "world_size");
  m.model_only = h5::attr_int(file, "model_only") != 0;
  m.mesh_dims = split(h5::attr_string(file, "mesh_dims"));
  m.mesh_shape = h5::attr_ints(file, "mesh_shape");
  m.model_args_json = h5::attr_string(file, "model_args");
  m.config_toml = h5::attr_string(file, "config_toml");
  // Files written before state_keys existed hold these three.
  const std::vector<std::string> keys =
      h5::has_attr(file, "state_keys") ? split(h5::attr_string(file, "state_keys"))
                                       : std::vector<std::string>{"optimizer_step", "lr_scheduler_step",
                                                                  "data_consumed_sequences"};
  for (auto& k : keys) m.state[k] = h5::attr_int(file, k);
  m.global_batch = h5::attr_int(file, "global_batch");
  m.seq_len = h5::attr_int(file, "seq_len");
  return m;
}

}  // namespace titan
