#include "trainer/config/config_loader.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <type_traits>
#include <toml++/toml.h>

#include "common/error.h"
#include "trainer/config/config_keys.h"
#include "trainer/config/config_text.h"
#include "trainer/config/torchtitan_keys.h"

namespace titan {
namespace {

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

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string type_name(const KeySpec& s) {
  struct Visitor {
    std::string operator()(bool*) const { return "a boolean (true or false)"; }
    std::string operator()(int64_t*) const { return "an integer"; }
    std::string operator()(double*) const { return "a number"; }
    std::string operator()(std::string*) const { return "a string"; }
    std::string operator()(std::vector<std::string>*) const {
      return "a list of strings (on the command line a,b or [\"a\", \"b\"])";
    }
    std::string operator()(const EnumField& e) const { return "one of " + join(e.names, " | "); }
  };
  return std::visit(Visitor{}, s.field);
}

void check_section(const std::string& section, const std::string& where) {
  const KeyTable& table = KeyTable::get();
  if (table.has_section(section)) return;
  TITAN_CONFIG_FAIL(where, "unknown section [", section, "]; did you mean [",
                    closest(section, table.sections()), "]?");
}

// A key the table does not hold: names its section's closest key, or the closest section.
[[noreturn]] void unknown_key(const std::string& section, const std::string& key, const std::string& where) {
  check_section(section, where);
  std::vector<std::string> keys_in_section;
  for (const auto& s : KeyTable::get().keys()) {
    if (s.section == section) keys_in_section.push_back(s.key);
  }
  TITAN_CONFIG_FAIL(where, "unknown key '", section, ".", key, "'; did you mean '", section, ".",
                    closest(key, keys_in_section), "'?");
}

// The type, with the allowed range for numbers and the allowed names for choices.
std::string format_range(const KeySpec& s) {
  std::ostringstream os;
  os << type_name(s);
  if (!s.is_number() || (s.min == -kInf && s.max == kInf)) return os.str();
  // Integer limits in full (1048576, not 1.04858e+06).
  const bool whole = std::holds_alternative<int64_t*>(s.field);
  auto num = [whole](double v) {
    std::ostringstream n;
    if (whole) {
      n << static_cast<long long>(v);
    } else {
      n << v;
    }
    return n.str();
  };
  if (s.min != -kInf && s.max != kInf) {
    os << " in [" << num(s.min) << ", " << num(s.max) << "]";
  } else if (s.min != -kInf) {
    os << " >= " << num(s.min);
  } else {
    os << " <= " << num(s.max);
  }
  return os.str();
}

bool in_range(const KeySpec& s, double v) { return std::isfinite(v) && v >= s.min && v <= s.max; }

void check_number(const KeySpec& s, double v, const std::string& shown, const std::string& where) {
  TITAN_CONFIG_CHECK(in_range(s, v), where, "invalid value ", shown,
                     " for '", s.full(), "': expected ", format_range(s));
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

// Where a key's value goes: the same member of the config being loaded as the one its
// KeyTable entry names in the table's proto() (KeyTable::in).
static_assert(!std::is_polymorphic_v<JobConfig>, "KeyTable::in's offsets assume a plain JobConfig");
struct Target {
  JobConfig* cfg = nullptr;
  template <typename T>
  T* operator()(T* field) const {
    return KeyTable::get().in(*cfg, field);
  }
};

// Sets the field from a value given as text (an override, or a TOML string/number turned to
// text by the caller after its own type check).
void set_choice(const KeySpec& s, const EnumField& e, const std::string& v, const std::string& where, Target to) {
  auto it = std::find(e.names.begin(), e.names.end(), v);
  TITAN_CONFIG_CHECK(it != e.names.end(), where, "invalid value \"", v, "\" for '", s.full(),
                     "': expected one of ", join(e.names, ", "));
  e.write(to(e.at), static_cast<size_t>(it - e.names.begin()));
}

template <typename T>
T parse_number(const KeySpec& s, const std::string& v, const std::string& shown, const std::string& where) {
  size_t used = 0;
  T x{};
  try {
    if constexpr (std::is_same_v<T, int64_t>) {
      x = std::stoll(v, &used);
    } else {
      x = std::stod(v, &used);
    }
  } catch (const std::exception&) {
    wrong_type(s, shown, where);
  }
  if (used != v.size()) wrong_type(s, shown, where);
  check_number(s, static_cast<double>(x), shown, where);
  return x;
}

void set_from_toml(const KeySpec& s, const toml::node& n, const std::string& where, Target to) {
  struct Visitor {
    const KeySpec& s;
    const toml::node& n;
    const std::string& where;
    Target to;
    // The value as written, for an error only: printing it took an ostream per key read.
    std::string shown() const { return node_text(n); }
    void operator()(bool* field) const {
      bool* f = to(field);
      if (!n.is_boolean()) wrong_type(s, shown(), where);
      *f = n.as_boolean()->get();
    }
    void operator()(int64_t* field) const {
      int64_t* f = to(field);
      if (!n.is_integer()) wrong_type(s, shown(), where);
      *f = n.as_integer()->get();
      if (!in_range(s, static_cast<double>(*f))) check_number(s, static_cast<double>(*f), shown(), where);
    }
    void operator()(double* field) const {
      double* f = to(field);
      if (!n.is_number()) wrong_type(s, shown(), where);
      *f = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
      if (!in_range(s, *f)) check_number(s, *f, shown(), where);
    }
    void operator()(std::string* f) const {
      if (!n.is_string()) wrong_type(s, shown(), where);
      *to(f) = n.as_string()->get();
    }
    void operator()(std::vector<std::string>* f) const {
      auto* arr = n.as_array();
      if (!arr) wrong_type(s, shown(), where);
      std::vector<std::string> out;
      for (auto& e : *arr) {
        if (!e.is_string()) wrong_type(s, shown(), where);
        out.push_back(e.as_string()->get());
      }
      *to(f) = out;
    }
    void operator()(const EnumField& e) const {
      if (!n.is_string()) wrong_type(s, shown(), where);
      set_choice(s, e, n.as_string()->get(), where, to);
    }
  };
  std::visit(Visitor{s, n, where, to}, s.field);
}

void set_from_text(const KeySpec& s, const std::string& v, const std::string& where, Target to) {
  const std::string shown = "'" + v + "'";
  struct Visitor {
    const KeySpec& s;
    const std::string& v;
    const std::string& shown;
    const std::string& where;
    Target to;
    void operator()(bool* field) const {
      bool* f = to(field);
      if (v == "true" || v == "1") {
        *f = true;
      } else if (v == "false" || v == "0") {
        *f = false;
      } else {
        wrong_type(s, shown, where);
      }
    }
    void operator()(int64_t* f) const { *to(f) = parse_number<int64_t>(s, v, shown, where); }
    void operator()(double* f) const { *to(f) = parse_number<double>(s, v, shown, where); }
    void operator()(std::string* f) const { *to(f) = v; }
    void operator()(std::vector<std::string>* f) const {
      if (!v.empty() && v.front() == '[') {  // the TOML form, as in a config file: ["a", "b"]
        toml::table t;
        try {
          t = toml::parse("v = " + v);
        } catch (const std::exception&) {
          wrong_type(s, shown, where);
        }
        set_from_toml(s, *t["v"].node(), where, to);
        return;
      }
      std::vector<std::string> out;  // else comma-separated: a,b
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (!item.empty()) out.push_back(item);
      }
      *to(f) = out;
    }
    void operator()(const EnumField& e) const { set_choice(s, e, v, where, to); }
  };
  std::visit(Visitor{s, v, shown, where, to}, s.field);
}

// Every value of a section with its dotted key; sub-tables ([quantize.linear.float8]) are joined
// with '.', as TorchTitan's nested sections are. A table given where a key takes a value
// (`exclude_from_loading = { a = 1 }`) stays one value, so that the error is its type, not
// "unknown key 'checkpoint.exclude_from_loading.a'; did you mean 'checkpoint.exclude_from_loading'?".
void flatten(const toml::table& t, const std::string& prefix,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (auto&& [k, v] : t) {
    const std::string name = prefix + std::string(k.str());
    const bool is_key = KeyTable::get().find(name) != nullptr;
    if (v.is_table() && !is_key) {
      flatten(*v.as_table(), name + ".", out);
    } else {
      out.emplace_back(name, &v);
    }
  }
}

// The KeyTable entry for a key as written (a TorchTitan alias resolves to titan's key);
// nullptr, after noting it in cfg.ignored_keys, for a TorchTitan key titan does not implement.
// The one lookup behind a TOML file's keys and the command line's.
const KeySpec* resolve_key(JobConfig& cfg, const std::string& written, const std::string& where) {
  const std::string full = titan_key_for(written);
  // A key titan registers is honoured even where TorchTitan's list calls its section or key
  // unimplemented: the registry, not that list, says what titan implements.
  if (const KeySpec* spec = KeyTable::get().find(full)) return spec;
  if (torchtitan_only_key(full)) {
    cfg.ignored_keys.push_back(written);
    return nullptr;
  }
  const auto dot = full.find('.');
  unknown_key(full.substr(0, dot), full.substr(dot + 1), where);
}

std::string titan_value(JobConfig& cfg, const KeySpec& s, const std::string& v) {
  std::string note;
  std::string out = titan_value_for(s.full(), v, &note);
  if (!note.empty()) cfg.ignored_keys.push_back(note);
  return out;
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
  const Target to{&cfg};
  for (auto&& [section, node] : tbl) {
    const std::string where_s =
        file_label + ":" + std::to_string(node.source().begin.line) + ": ";
    TITAN_CONFIG_CHECK(node.is_table(), where_s, "'", section.str(),
                       "' is outside any [section]; every key belongs to one, e.g. [training]");
    const std::string sec(section.str());
    // A section TorchTitan has and titan lacks ([float8]) is noted key by key, not refused.
    if (!torchtitan_only_key(sec + ".")) check_section(sec, where_s);
    std::vector<std::pair<std::string, const toml::node*>> entries;
    flatten(*node.as_table(), sec + ".", entries);
    for (auto& [name, value] : entries) {
      const std::string where =
          file_label + ":" + std::to_string(value->source().begin.line) + ": ";
      const KeySpec* spec = resolve_key(cfg, name, where);
      if (!spec) continue;
      if (auto* str = value->as_string()) {
        const std::string v = titan_value(cfg, *spec, str->get());
        if (v != str->get()) {
          set_from_toml(*spec, toml::value<std::string>(v), where, to);
          continue;
        }
      }
      set_from_toml(*spec, *value, where, to);
    }
  }
}

void apply_override(JobConfig& cfg, const std::string& key, const std::string& value) {
  const std::string where = "command line --" + key + ": ";
  auto dot = key.find('.');
  TITAN_CONFIG_CHECK(dot != std::string::npos, where, "expected --section.key, got --", key);
  if (const KeySpec* spec = resolve_key(cfg, key, where))
    set_from_text(*spec, titan_value(cfg, *spec, value), where, Target{&cfg});
}

std::string config_help() {
  // The table's own config holds the defaults.
  const KeyTable& table = KeyTable::get();
  std::ostringstream os;
  os << "usage: titan-train --config FILE [--section.key VALUE | --section.key=VALUE ...]\n"
     << "Command line beats file beats defaults. Keys (default, type):\n";
  std::string section;
  for (const auto& s : table.keys()) {
    if (s.section != section) os << "\n[" << (section = s.section) << "]\n";
    os << "  --" << s.full() << " = " << value_text(s) << "   (" << format_range(s) << ") "
       << s.help << "\n";
  }
  return os.str();
}

}  // namespace titan
