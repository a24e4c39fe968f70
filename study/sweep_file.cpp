// Sweep file reader (see sweep_file.h).
#include "study/sweep_file.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <tuple>

#include <toml++/toml.h>

#include "common/error.h"

namespace titan::study {
namespace {

// A scalar as the command line would spell it.
std::string scalar_text(const toml::node& n, const std::string& where) {
  if (auto s = n.value<std::string>(); s && n.is_string()) return *s;
  if (n.is_integer()) return std::to_string(*n.value<int64_t>());
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  if (n.is_floating_point()) {
    std::ostringstream os;
    os.precision(17);
    os << *n.value<double>();
    return os.str();
  }
  TITAN_CONFIG_CHECK(false, where, ": values must be strings, numbers or booleans");
  return {};
}

struct Entry {
  std::string key;
  const toml::node* node;
  int64_t line;
};

// Leaves of a table as "a.b.c" keys, nested tables flattened.
void flatten(const toml::table& t, const std::string& prefix, std::vector<Entry>& out) {
  for (auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (auto* sub = v.as_table()) {
      flatten(*sub, key, out);
    } else {
      out.push_back({key, &v, static_cast<int64_t>(v.source().begin.line)});
    }
  }
  // toml++ keeps keys sorted; combinations follow the order the file lists them.
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.line < b.line; });
}

}  // namespace

std::vector<Overrides> SweepFile::combinations() const {
  std::vector<Overrides> out(1, fixed);
  for (const auto& [key, values] : axes) {
    std::vector<Overrides> next;
    next.reserve(out.size() * values.size());
    for (const auto& o : out)
      for (const auto& v : values) {
        next.push_back(o);
        next.back().emplace_back(key, v);
      }
    out = std::move(next);
  }
  return out;
}

SweepFile parse_sweep(const std::string& text, const std::string& label) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, label);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_CHECK(false, "sweep file ", label, " line ", e.source().begin.line, ": ", e.description());
  }
  SweepFile s;
  for (auto& [k, v] : tbl) {
    const std::string section(k.str());
    TITAN_CONFIG_CHECK(section == "study" || section == "sweep" || section == "fixed" || section == "search",
                       "sweep file ", label, ": unknown section [", section,
                       "] (sections: [study], [sweep], [fixed], [search])");
    TITAN_CONFIG_CHECK(v.is_table(), "sweep file ", label, ": ", section, " must be a table");
  }
  if (auto* st = tbl["study"].as_table()) {
    for (auto& [k, v] : *st) {
      const std::string key(k.str()), where = "sweep file " + label + ": study." + key;
      if (key == "name") s.name = scalar_text(v, where);
      else if (key == "search") s.search = scalar_text(v, where) == "true";
      else if (key == "x") s.x_key = scalar_text(v, where);
      else if (key == "series") s.series_key = scalar_text(v, where);
      else TITAN_CONFIG_CHECK(false, where, ": unknown key (keys: name, search, x, series)");
    }
  }
  if (auto* fx = tbl["fixed"].as_table()) {
    std::vector<Entry> entries;
    flatten(*fx, "", entries);
    for (auto& e : entries) s.fixed.emplace_back(e.key, scalar_text(*e.node, "sweep file " + label + ": fixed." + e.key));
  }
  auto lists = [&](const toml::table& t, const std::string& section,
                   std::vector<std::pair<std::string, std::vector<std::string>>>& out) {
    std::vector<Entry> entries;
    flatten(t, "", entries);
    for (auto& e : entries) {
      const std::string where = "sweep file " + label + " line " + std::to_string(e.line) + ": " + section + "." + e.key;
      std::vector<std::string> values;
      if (auto* arr = e.node->as_array()) {
        for (auto& item : *arr) values.push_back(scalar_text(item, where));
      } else {
        values.push_back(scalar_text(*e.node, where));
      }
      TITAN_CONFIG_CHECK(!values.empty(), where, ": empty list of values");
      out.emplace_back(e.key, std::move(values));
    }
  };
  if (auto* se = tbl["search"].as_table()) lists(*se, "search", s.search_space);
  auto* sw = tbl["sweep"].as_table();
  TITAN_CONFIG_CHECK((sw && !sw->empty()) || s.search, "sweep file ", label,
                     ": needs a [sweep] table of keys and value lists (or [study] search = true)");
  if (sw) lists(*sw, "sweep", s.axes);
  auto swept = [&](const std::string& k) {
    return std::any_of(s.axes.begin(), s.axes.end(), [&](const auto& a) { return a.first == k; });
  };
  TITAN_CONFIG_CHECK(s.x_key.empty() || swept(s.x_key), "sweep file ", label, ": study.x = \"", s.x_key,
                     "\" is not a key of [sweep]");
  TITAN_CONFIG_CHECK(s.series_key.empty() || swept(s.series_key), "sweep file ", label, ": study.series = \"",
                     s.series_key, "\" is not a key of [sweep]");
  return s;
}

SweepFile read_sweep_file(const std::string& path) {
  std::ifstream in(path);
  TITAN_CONFIG_CHECK(in.good(), "sweep file ", path, ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  SweepFile s = parse_sweep(ss.str(), path);
  if (s.name.empty()) {
    std::string base = path.substr(path.find_last_of('/') + 1);
    s.name = base.substr(0, base.rfind('.'));
  }
  return s;
}

}  // namespace titan::study
