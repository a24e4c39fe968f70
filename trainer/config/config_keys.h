// The key registry: every config key with its section, type, limits or allowed names, help
// text and the JobConfig field it fills. The single place that knows each key; used by the
// loader (TOML, overrides), --help and the saved config.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "trainer/config/job_config.h"

namespace titan {

// A choice key: reads and writes an enum field by its index into `names`. The field is an
// address and two plain functions of it (not closures over it), so that the loader can aim a
// key at another config's field (every key read goes through the one KeyTable below).
struct EnumField {
  std::vector<std::string> names;
  void* at = nullptr;
  size_t (*read)(const void* field) = nullptr;
  void (*write)(void* field, size_t index) = nullptr;
  size_t get() const { return read(at); }
  void set(size_t i) const { write(at, i); }
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
    EnumField e{enum_names<E>(), f, [](const void* p) { return static_cast<size_t>(*static_cast<const E*>(p)); },
                [](void* p, size_t i) { *static_cast<E*>(p) = static_cast<E>(i); }};
    keys.push_back({s, k, std::move(e), 0, 0, help});
  }
};

// Every key of `cfg`, in the order --help and saved configs list them; fields point into cfg.
Registry make_registry(JobConfig& cfg);

// The one registry every key read goes through (a TOML file's and a command line's): a study
// applies some ten overrides per configuration and a TOML config per recording
// (study/recorder_pool.cpp), and building the registry (200 keys with their help texts) per
// call was most of the cost of either. Its entries' fields lie in proto(); a caller writes the
// same field of its own config, at the same offset (config_loader.cpp). Built once, read-only
// after, so shared by threads.
class KeyTable {
 public:
  // Throws (a bug, not a config error) if some key's field lies outside proto(): no offset
  // would name it in another config.
  static const KeyTable& get();
  // One table: a copy's enum fields would still point into this one's proto().
  KeyTable(const KeyTable&) = delete;
  KeyTable& operator=(const KeyTable&) = delete;
  // The key of that full name ("section.key"); null if none.
  const KeySpec* find(const std::string& full) const;
  // Every key, in make_registry's order (for "did you mean" and --help).
  const std::vector<KeySpec>& keys() const { return reg_.keys; }
  // The sections, in the keys' order.
  const std::vector<std::string>& sections() const { return sections_; }
  bool has_section(const std::string& section) const;
  const JobConfig& proto() const { return proto_; }
  // The same member in another config: an entry's field lies in proto(), and the member of cfg
  // it names at the same offset from cfg's start (a plain aggregate: no virtual bases or
  // functions move members between objects of the one type).
  template <typename T>
  T* in(JobConfig& cfg, T* field) const {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(&cfg) + offset(field));
  }
  template <typename T>
  const T* in(const JobConfig& cfg, const T* field) const {
    return reinterpret_cast<const T*>(reinterpret_cast<const char*>(&cfg) + offset(field));
  }

 private:
  std::ptrdiff_t offset(const void* field) const {
    return static_cast<const char*>(field) - reinterpret_cast<const char*>(&proto_);
  }
  KeyTable();
  JobConfig proto_;
  Registry reg_;
  std::unordered_map<std::string, size_t> by_name_;  // the first key of each name
  std::vector<std::string> sections_;
};

}  // namespace titan
