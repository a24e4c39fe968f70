// The key registry: every config key with its section, type, limits or allowed names, help
// text and the JobConfig field it fills. The single place that knows each key; used by the
// loader (TOML, overrides), --help and the saved config.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "trainer/config/job_config.h"

namespace titan {

// A choice key: reads and writes an enum field by its index into `names`.
struct EnumField {
  std::vector<std::string> names;
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};

using KeyField = std::variant<bool*, int64_t*, double*, std::string*, std::vector<std::string>*, EnumField>;

struct KeySpec {
  std::string section;
  std::string key;
  KeyField field;
  double min = -std::numeric_limits<double>::infinity();  // numbers only
  double max = std::numeric_limits<double>::infinity();
  std::string help;
  std::string full() const { return section + "." + key; }
  bool is_number() const {
    return std::holds_alternative<int64_t*>(field) || std::holds_alternative<double*>(field);
  }
};

struct Registry {
  std::vector<KeySpec> keys;
  void add(const std::string& s, const std::string& k, bool* f, const std::string& help) {
    keys.push_back({s, k, f, 0, 0, help});
  }
  void add(const std::string& s, const std::string& k, int64_t* f, double lo, double hi,
           const std::string& help) {
    keys.push_back({s, k, f, lo, hi, help});
  }
  void add(const std::string& s, const std::string& k, double* f, double lo, double hi,
           const std::string& help) {
    keys.push_back({s, k, f, lo, hi, help});
  }
  void add(const std::string& s, const std::string& k, std::string* f, const std::string& help) {
    keys.push_back({s, k, f, 0, 0, help});
  }
  void add(const std::string& s, const std::string& k, std::vector<std::string>* f,
           const std::string& help) {
    keys.push_back({s, k, f, 0, 0, help});
  }
  template <typename E>
  void add(const std::string& s, const std::string& k, E* f, const std::string& help) {
    EnumField e{enum_names<E>(), [f] { return static_cast<size_t>(*f); },
                [f](size_t i) { *f = static_cast<E>(i); }};
    keys.push_back({s, k, std::move(e), 0, 0, help});
  }
};

// Every key of `cfg`, in the order --help and saved configs list them; fields point into cfg.
Registry make_registry(JobConfig& cfg);

}  // namespace titan
