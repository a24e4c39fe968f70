// A config's values as TOML text (see config_text.h).
#include "trainer/config/config_text.h"

#include <charconv>
#include <cmath>

#include "trainer/config/config_loader.h"

namespace titan {

namespace {

std::string toml_quoted(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::string value_text(const KeySpec& s) {
  struct Visitor {
    std::string operator()(bool* f) const { return *f ? "true" : "false"; }
    std::string operator()(int64_t* f) const { return std::to_string(*f); }
    // As an ostream at precision 17 writes it, printf's %.17g, which to_chars at precision
    // 17 is defined to match (the same text for 6 million random bit patterns, infinities,
    // NaNs and -0.0), at a sixth of the ostream's cost: a study writes a config per recording key.
    std::string operator()(double* f) const {
      char buf[40];
      const auto end = std::to_chars(buf, buf + sizeof buf, *f, std::chars_format::general, 17).ptr;
      std::string out(buf, end);
      if (std::floor(*f) == *f && std::abs(*f) < 1e15) out += ".0";
      return out;
    }
    std::string operator()(std::string* f) const { return toml_quoted(*f); }
    std::string operator()(std::vector<std::string>* f) const {
      std::string out = "[";
      for (size_t i = 0; i < f->size(); ++i) out += (i ? ", " : "") + toml_quoted((*f)[i]);
      return out + "]";
    }
    std::string operator()(const EnumField& e) const { return toml_quoted(e.names[e.get()]); }
  };
  return std::visit(Visitor{}, s.field);
}

std::string config_to_toml(const JobConfig& cfg) {
  // The registry's fields point into the config it was made for. Each thread makes one once,
  // over its own copy that every call overwrites (assignment keeps the fields' addresses),
  // instead of 129 keys' names, help texts and functions per call: a study keys each of its
  // thousands of probes by this text. The registry has the same keys whatever the values.
  struct Layout {
    JobConfig cfg;
    Registry reg = make_registry(cfg);
    Layout() = default;
    Layout(const Layout&) = delete;
    Layout& operator=(const Layout&) = delete;
  };
  thread_local Layout layout;
  layout.cfg = cfg;
  std::string out;
  out.reserve(4096);
  const std::string* section = nullptr;
  for (const auto& s : layout.reg.keys) {
    if (!section || s.section != *section) {
      if (section) out += '\n';
      out += '[';
      out += s.section;
      out += "]\n";
      section = &s.section;
    }
    out += s.key;
    out += " = ";
    out += value_text(s);
    out += '\n';
  }
  return out;
}

}  // namespace titan
