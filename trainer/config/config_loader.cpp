#include "trainer/config/config_loader.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <toml++/toml.h>

#include "common/error.h"

namespace titan {
namespace {

enum class KeyType { kBool, kInt, kFloat, kString, kStringList };

// One entry of the key registry: the single place that knows each key's type and limits.
struct KeySpec {
  std::string section;
  std::string key;
  KeyType type;
  void* field;
  std::vector<std::string> choices;  // strings: allowed values (empty: any)
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::string help;
  std::string full() const { return section + "." + key; }
};

struct Registry {
  std::vector<KeySpec> keys;
  void add(const std::string& s, const std::string& k, bool* f, const std::string& help) {
    keys.push_back({s, k, KeyType::kBool, f, {}, 0, 0, help});
  }
  void add(const std::string& s, const std::string& k, int64_t* f, double lo, double hi,
           const std::string& help) {
    keys.push_back({s, k, KeyType::kInt, f, {}, lo, hi, help});
  }
  void add(const std::string& s, const std::string& k, double* f, double lo, double hi,
           const std::string& help) {
    keys.push_back({s, k, KeyType::kFloat, f, {}, lo, hi, help});
  }
  void add(const std::string& s, const std::string& k, std::string* f,
           std::vector<std::string> choices, const std::string& help) {
    keys.push_back({s, k, KeyType::kString, f, std::move(choices), 0, 0, help});
  }
  void add(const std::string& s, const std::string& k, std::vector<std::string>* f,
           const std::string& help) {
    keys.push_back({s, k, KeyType::kStringList, f, {}, 0, 0, help});
  }
};

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<std::string> kDtypes = {"float32", "bfloat16", "float16"};
const std::vector<std::string> kTriState = {"flavor", "true", "false"};

Registry make_registry(JobConfig& c) {
  Registry r;
  r.add("job", "dump_folder", &c.job.dump_folder, {}, "folder for metrics, traces, checkpoints");
  r.add("job", "description", &c.job.description, {}, "free text");
  r.add("job", "print_config", &c.job.print_config, "print the resolved config at start");

  r.add("model", "name", &c.model.name, {"qwen3", "llama3"}, "model family");
  r.add("model", "flavor", &c.model.flavor, {}, "published size, e.g. debugmodel, 0.6B, 8B");
  r.add("model", "tokenizer_path", &c.model.tokenizer_path, {},
        "\"\" or \"byte\": byte-level; else a Hugging Face tokenizer.json");
  r.add("model", "dim", &c.model.dim, 0, kInf, "hidden size (0: flavor's)");
  r.add("model", "n_layers", &c.model.n_layers, 0, kInf, "layers (0: flavor's)");
  r.add("model", "n_heads", &c.model.n_heads, 0, kInf, "query heads (0: flavor's)");
  r.add("model", "n_kv_heads", &c.model.n_kv_heads, 0, kInf, "key/value heads (0: flavor's)");
  r.add("model", "head_dim", &c.model.head_dim, 0, kInf, "per-head dim (0: flavor's)");
  r.add("model", "ffn_dim", &c.model.ffn_dim, 0, kInf, "MLP intermediate size (0: flavor's)");
  r.add("model", "vocab_size", &c.model.vocab_size, 0, kInf,
        "vocabulary (0: flavor's, or the tokenizer's for debugmodel)");
  r.add("model", "tie_embeddings", &c.model.tie_embeddings, kTriState,
        "share input embedding and output projection");
  r.add("model", "rope_theta", &c.model.rope_theta, 0, kInf, "RoPE base (0: flavor's)");
  r.add("model", "norm_eps", &c.model.norm_eps, 0, 1, "RMSNorm epsilon (0: flavor's)");
  r.add("model", "qk_norm", &c.model.qk_norm, kTriState, "RMSNorm on q and k per head");

  r.add("optimizer", "name", &c.optimizer.name, {"AdamW"}, "optimizer");
  r.add("optimizer", "lr", &c.optimizer.lr, 0, kInf, "peak learning rate");
  r.add("optimizer", "beta1", &c.optimizer.beta1, 0, 0.999999, "AdamW beta1");
  r.add("optimizer", "beta2", &c.optimizer.beta2, 0, 0.999999, "AdamW beta2");
  r.add("optimizer", "eps", &c.optimizer.eps, 0, 1, "AdamW epsilon");
  r.add("optimizer", "weight_decay", &c.optimizer.weight_decay, 0, kInf, "decoupled weight decay");

  r.add("lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps, 0, kInf,
        "linear warmup steps");
  r.add("lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio, -1, 1,
        "fraction of steps spent decaying at the end (-1: all steps after warmup)");
  r.add("lr_scheduler", "decay_type", &c.lr_scheduler.decay_type, {"linear", "sqrt", "cosine"},
        "decay shape");
  r.add("lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor, 0, 1,
        "final lr as a fraction of lr");

  r.add("training", "local_batch_size", &c.training.local_batch_size, 1, kInf,
        "sequences per micro-batch per data-parallel rank");
  r.add("training", "global_batch_size", &c.training.global_batch_size, -1, kInf,
        "sequences per step over all ranks (-1: local x data-parallel degree)");
  r.add("training", "seq_len", &c.training.seq_len, 1, kInf, "tokens per sequence");
  r.add("training", "max_norm", &c.training.max_norm, 0, kInf,
        "gradient clipping by global norm (0: off)");
  r.add("training", "steps", &c.training.steps, 0, kInf, "optimizer steps");
  r.add("training", "dataset", &c.training.dataset, {"corpus", "text"}, "dataset kind");
  r.add("training", "dataset_path", &c.training.dataset_path, {},
        "text file (\"\": the shipped corpus)");
  r.add("training", "mixed_precision_param", &c.training.mixed_precision_param, kDtypes,
        "dtype of parameters in compute (all-gather dtype under FSDP)");
  r.add("training", "mixed_precision_reduce", &c.training.mixed_precision_reduce, kDtypes,
        "dtype of gradient reduction");
  r.add("training", "seed", &c.training.seed, 0, kInf, "seed for initialization and data");
  r.add("training", "deterministic", &c.training.deterministic, "deterministic algorithms");
  r.add("training", "fused_kernels", &c.training.fused_kernels,
        "fused CPU kernels for RMSNorm, SwiGLU, RoPE, attention and cross entropy (false: composite ATen ops)");
  r.add("training", "threads", &c.training.threads, 0, 4096,
        "intra-op threads per rank (0: cores / ranks on this host)");

  auto& p = c.parallelism;
  r.add("parallelism", "data_parallel_replicate_degree", &p.data_parallel_replicate_degree, 1,
        kInf, "DDP / HSDP replicas");
  r.add("parallelism", "data_parallel_shard_degree", &p.data_parallel_shard_degree, -1, kInf,
        "FSDP shards (-1: inferred from the world size)");
  r.add("parallelism", "tensor_parallel_degree", &p.tensor_parallel_degree, 1, kInf, "TP");
  r.add("parallelism", "pipeline_parallel_degree", &p.pipeline_parallel_degree, 1, kInf, "PP");
  r.add("parallelism", "context_parallel_degree", &p.context_parallel_degree, 1, kInf, "CP");
  r.add("parallelism", "fsdp_reshard_after_forward", &p.fsdp_reshard_after_forward,
        {"default", "always", "never"}, "free gathered parameters after forward");
  r.add("parallelism", "enable_sequence_parallel", &p.enable_sequence_parallel,
        "shard norms along the sequence under TP");
  r.add("parallelism", "disable_loss_parallel", &p.disable_loss_parallel,
        "gather logits before the loss under TP");
  r.add("parallelism", "pipeline_parallel_schedule", &p.pipeline_parallel_schedule,
        {"GPipe", "1F1B", "Interleaved1F1B"}, "pipeline schedule");
  r.add("parallelism", "pipeline_parallel_microbatch_size", &p.pipeline_parallel_microbatch_size,
        1, kInf, "sequences per pipeline micro-batch");

  auto& k = c.checkpoint;
  r.add("checkpoint", "enable", &k.enable, "save checkpoints");
  r.add("checkpoint", "folder", &k.folder, {}, "under dump_folder");
  r.add("checkpoint", "interval", &k.interval, 1, kInf, "steps between saves");
  r.add("checkpoint", "keep_latest_k", &k.keep_latest_k, 0, kInf, "0: keep all");
  r.add("checkpoint", "load_step", &k.load_step, -1, kInf, "-1: newest complete");
  r.add("checkpoint", "initial_load_path", &k.initial_load_path, {}, "checkpoint to start from");
  r.add("checkpoint", "initial_load_model_only", &k.initial_load_model_only,
        "load only weights from initial_load_path");
  r.add("checkpoint", "last_save_model_only", &k.last_save_model_only,
        "final save holds weights only");
  r.add("checkpoint", "export_dtype", &k.export_dtype, kDtypes, "dtype of a model-only save");
  r.add("checkpoint", "async_mode", &k.async_mode, {"disabled", "async"}, "background writes");
  r.add("checkpoint", "create_seed_checkpoint", &k.create_seed_checkpoint,
        "write step-0 weights and exit");
  r.add("checkpoint", "exclude_from_loading", &k.exclude_from_loading,
        "state names not loaded (e.g. [\"optimizer\", \"dataloader\"])");

  r.add("activation_checkpoint", "mode", &c.activation_checkpoint.mode,
        {"none", "selective", "full"}, "recompute activations in backward");
  r.add("activation_checkpoint", "selective_every", &c.activation_checkpoint.selective_every, 1,
        kInf, "selective: every Nth block is recomputed");

  r.add("metrics", "log_freq", &c.metrics.log_freq, 1, kInf, "steps between log lines");
  r.add("metrics", "peak_flops", &c.metrics.peak_flops, 0, kInf,
        "peak FLOP/s per rank for MFU (0: measured)");

  r.add("comm", "backend", &c.comm.backend, {"mpi", "gloo"}, "collective backend");
  r.add("comm", "collective_mode", &c.comm.collective_mode, {"fused", "separate"},
        "coalesced async collectives, or one blocking unit per collective");
  r.add("comm", "bucket_cap_mb", &c.comm.bucket_cap_mb, 0.001, kInf, "fused bucket size");
  r.add("comm", "init_timeout_seconds", &c.comm.init_timeout_seconds, 1, kInf,
        "limit for start-up rendezvous");
  r.add("comm", "train_timeout_seconds", &c.comm.train_timeout_seconds, 1, kInf,
        "limit for one collective");
  r.add("comm", "rendezvous_dir", &c.comm.rendezvous_dir, {},
        "gloo: shared folder where ranks meet (\"\": /tmp/titan-gloo-<job id>)");

  r.add("simulation", "enable", &c.simulation.enable, "run the step on simulated hardware");
  r.add("simulation", "device", &c.simulation.device, {}, "chip name, e.g. tpu-v7, h100");
  r.add("simulation", "num_chips", &c.simulation.num_chips, 1, kInf, "simulated chips");
  r.add("simulation", "topology", &c.simulation.topology, {},
        "physical topology such as 16x16x32 (\"\": automatic)");
  r.add("simulation", "execution", &c.simulation.execution, {"eager", "defer_and_fuse", "compiled"},
        "how ops are dispatched on the device");
  return r;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

const char* type_name(KeyType t) {
  switch (t) {
    case KeyType::kBool: return "a boolean (true or false)";
    case KeyType::kInt: return "an integer";
    case KeyType::kFloat: return "a number";
    case KeyType::kString: return "a string";
    case KeyType::kStringList: return "a list of strings";
  }
  return "?";
}

void check_section(const Registry& r, const std::string& section, const std::string& where) {
  std::vector<std::string> sections;
  for (auto& s : r.keys) {
    if (s.section == section) return;
    if (std::find(sections.begin(), sections.end(), s.section) == sections.end())
      sections.push_back(s.section);
  }
  TITAN_CONFIG_FAIL(where, "unknown section [", section, "]; did you mean [",
                    closest(section, sections), "]?");
}

KeySpec* find_key(Registry& r, const std::string& section, const std::string& key,
                  const std::string& where) {
  check_section(r, section, where);
  std::vector<std::string> keys_in_section;
  for (auto& s : r.keys) {
    if (s.section == section) {
      keys_in_section.push_back(s.key);
      if (s.key == key) return &s;
    }
  }
  TITAN_CONFIG_FAIL(where, "unknown key '", section, ".", key, "'; did you mean '", section, ".",
                    closest(key, keys_in_section), "'?");
}

std::string format_range(const KeySpec& s) {
  std::ostringstream os;
  if (s.min == -kInf && s.max == kInf) return type_name(s.type);
  os << type_name(s.type);
  if (s.min != -kInf && s.max != kInf) {
    os << " in [" << s.min << ", " << s.max << "]";
  } else if (s.min != -kInf) {
    os << " >= " << s.min;
  } else {
    os << " <= " << s.max;
  }
  return os.str();
}

void check_number(const KeySpec& s, double v, const std::string& shown, const std::string& where) {
  TITAN_CONFIG_CHECK(std::isfinite(v) && v >= s.min && v <= s.max, where, "invalid value ", shown,
                     " for '", s.full(), "': expected ", format_range(s));
}

void set_string(const KeySpec& s, const std::string& v, const std::string& where) {
  if (!s.choices.empty() && std::find(s.choices.begin(), s.choices.end(), v) == s.choices.end()) {
    TITAN_CONFIG_FAIL(where, "invalid value \"", v, "\" for '", s.full(), "': expected one of ",
                      join(s.choices, ", "));
  }
  *static_cast<std::string*>(s.field) = v;
}

[[noreturn]] void wrong_type(const KeySpec& s, const std::string& shown, const std::string& where) {
  TITAN_CONFIG_FAIL(where, "invalid value ", shown, " for '", s.full(), "': expected ",
                    format_range(s));
}

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  if (auto* s = n.as_string()) {
    os << '"' << s->get() << '"';
  } else {
    n.visit([&](auto&& v) { os << v; });
  }
  return os.str();
}

void set_from_toml(const KeySpec& s, const toml::node& n, const std::string& where) {
  const std::string shown = node_text(n);
  switch (s.type) {
    case KeyType::kBool:
      if (!n.is_boolean()) wrong_type(s, shown, where);
      *static_cast<bool*>(s.field) = n.as_boolean()->get();
      return;
    case KeyType::kInt: {
      if (!n.is_integer()) wrong_type(s, shown, where);
      int64_t v = n.as_integer()->get();
      check_number(s, static_cast<double>(v), shown, where);
      *static_cast<int64_t*>(s.field) = v;
      return;
    }
    case KeyType::kFloat: {
      if (!n.is_number()) wrong_type(s, shown, where);
      double v = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
      check_number(s, v, shown, where);
      *static_cast<double*>(s.field) = v;
      return;
    }
    case KeyType::kString:
      if (!n.is_string()) wrong_type(s, shown, where);
      set_string(s, n.as_string()->get(), where);
      return;
    case KeyType::kStringList: {
      auto* arr = n.as_array();
      if (!arr) wrong_type(s, shown, where);
      std::vector<std::string> out;
      for (auto& e : *arr) {
        if (!e.is_string()) wrong_type(s, shown, where);
        out.push_back(e.as_string()->get());
      }
      *static_cast<std::vector<std::string>*>(s.field) = out;
      return;
    }
  }
}

void set_from_text(const KeySpec& s, const std::string& v, const std::string& where) {
  const std::string shown = "'" + v + "'";
  switch (s.type) {
    case KeyType::kBool:
      if (v == "true" || v == "1") {
        *static_cast<bool*>(s.field) = true;
      } else if (v == "false" || v == "0") {
        *static_cast<bool*>(s.field) = false;
      } else {
        wrong_type(s, shown, where);
      }
      return;
    case KeyType::kInt: {
      size_t used = 0;
      int64_t x = 0;
      try {
        x = std::stoll(v, &used);
      } catch (const std::exception&) {
        wrong_type(s, shown, where);
      }
      if (used != v.size()) wrong_type(s, shown, where);
      check_number(s, static_cast<double>(x), shown, where);
      *static_cast<int64_t*>(s.field) = x;
      return;
    }
    case KeyType::kFloat: {
      size_t used = 0;
      double x = 0;
      try {
        x = std::stod(v, &used);
      } catch (const std::exception&) {
        wrong_type(s, shown, where);
      }
      if (used != v.size()) wrong_type(s, shown, where);
      check_number(s, x, shown, where);
      *static_cast<double*>(s.field) = x;
      return;
    }
    case KeyType::kString:
      set_string(s, v, where);
      return;
    case KeyType::kStringList: {
      std::vector<std::string> out;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back(item);
      }
      *static_cast<std::vector<std::string>*>(s.field) = out;
      return;
    }
  }
}

std::string quoted(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string value_text(const KeySpec& s) {
  std::ostringstream os;
  switch (s.type) {
    case KeyType::kBool: os << (*static_cast<bool*>(s.field) ? "true" : "false"); break;
    case KeyType::kInt: os << *static_cast<int64_t*>(s.field); break;
    case KeyType::kFloat: {
      os.precision(17);
      double v = *static_cast<double*>(s.field);
      os << v;
      if (std::floor(v) == v && std::abs(v) < 1e15) os << ".0";
      break;
    }
    case KeyType::kString: os << quoted(*static_cast<std::string*>(s.field)); break;
    case KeyType::kStringList: {
      os << "[";
      auto& l = *static_cast<std::vector<std::string>*>(s.field);
      for (size_t i = 0; i < l.size(); ++i) os << (i ? ", " : "") << quoted(l[i]);
      os << "]";
      break;
    }
  }
  return os.str();
}

}  // namespace

void apply_toml(JobConfig& cfg, const std::string& text, const std::string& file_label) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, file_label);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_FAIL(file_label, ":", e.source().begin.line, ": TOML syntax error: ",
                      e.description());
  }
  Registry reg = make_registry(cfg);
  for (auto&& [section, node] : tbl) {
    const std::string where_s =
        file_label + ":" + std::to_string(node.source().begin.line) + ": ";
    TITAN_CONFIG_CHECK(node.is_table(), where_s, "'", section.str(),
                       "' is outside any [section]; every key belongs to one, e.g. [training]");
    check_section(reg, std::string(section.str()), where_s);
    for (auto&& [key, value] : *node.as_table()) {
      const std::string where =
          file_label + ":" + std::to_string(key.source().begin.line) + ": ";
      KeySpec* spec = find_key(reg, std::string(section.str()), std::string(key.str()), where);
      set_from_toml(*spec, value, where);
    }
  }
}

void apply_override(JobConfig& cfg, const std::string& key, const std::string& value) {
  const std::string where = "command line --" + key + ": ";
  auto dot = key.find('.');
  TITAN_CONFIG_CHECK(dot != std::string::npos, where, "expected --section.key, got --", key);
  Registry reg = make_registry(cfg);
  KeySpec* spec = find_key(reg, key.substr(0, dot), key.substr(dot + 1), where);
  set_from_text(*spec, value, where);
}

void validate(const JobConfig& c) {
  const auto& t = c.training;
  if (t.global_batch_size > 0) {
    TITAN_CONFIG_CHECK(t.global_batch_size % t.local_batch_size == 0,
                       "training.global_batch_size (", t.global_batch_size,
                       ") must be a multiple of training.local_batch_size (", t.local_batch_size,
                       ")");
  }
  TITAN_CONFIG_CHECK(c.parallelism.data_parallel_shard_degree != 0,
                     "parallelism.data_parallel_shard_degree must be -1 or >= 1, got 0");
  TITAN_CONFIG_CHECK(c.optimizer.beta1 < 1 && c.optimizer.beta2 < 1, "optimizer betas must be < 1");
}

JobConfig load_job_config(const std::vector<std::string>& args) {
  JobConfig cfg;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    TITAN_CONFIG_CHECK(a.rfind("--", 0) == 0, "command line: unexpected argument '", a,
                       "' (options are --config FILE and --section.key VALUE)");
    std::string name = a.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      TITAN_CONFIG_CHECK(i + 1 < args.size(), "command line: --", name, " needs a value");
      value = args[++i];
    }
    if (name == "config" || name == "job.config_file") {
      cfg.source_file = value;
    } else {
      overrides.emplace_back(name, value);
    }
  }
  if (!cfg.source_file.empty()) {
    std::ifstream in(cfg.source_file);
    TITAN_CONFIG_CHECK(in.good(), "config file ", cfg.source_file, ": cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    apply_toml(cfg, ss.str(), cfg.source_file);
  }
  for (auto& [k, v] : overrides) apply_override(cfg, k, v);
  validate(cfg);
  return cfg;
}

std::string config_help() {
  JobConfig defaults;
  Registry reg = make_registry(defaults);
  std::ostringstream os;
  os << "usage: titan-train --config FILE [--section.key VALUE | --section.key=VALUE ...]\n"
     << "Command line beats file beats defaults. Keys (default, type):\n";
  std::string section;
  for (auto& s : reg.keys) {
    if (s.section != section) os << "\n[" << (section = s.section) << "]\n";
    os << "  --" << s.full() << " = " << value_text(s) << "   (" << format_range(s);
    if (!s.choices.empty()) os << ": " << join(s.choices, " | ");
    os << ") " << s.help << "\n";
  }
  return os.str();
}

std::string config_to_toml(const JobConfig& cfg) {
  JobConfig copy = cfg;
  Registry reg = make_registry(copy);
  std::ostringstream os;
  std::string section;
  for (auto& s : reg.keys) {
    if (s.section != section) os << (section.empty() ? "" : "\n") << "[" << (section = s.section) << "]\n";
    os << s.key << " = " << value_text(s) << "\n";
  }
  return os.str();
}

}  // namespace titan
