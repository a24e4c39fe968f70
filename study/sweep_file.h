// Sweep files: which config keys a study varies and with which values, read from TOML and
// expanded into one list of `--section.key value` overrides per combination. Used by
// titan-study (main.cpp) and the study tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace titan::study {

using Overrides = std::vector<std::pair<std::string, std::string>>;  // key, value as text

struct SweepFile {
  std::string name;                 // [study] name: the output sub-folder and plot titles
  bool search = false;              // [study] search: each combination is a layout search
                                    // ([sweep] may then be absent: one search of the base)
  std::string x_key;                // [study] x: the plots' horizontal axis (a swept key)
  std::string series_key;           // [study] series: one line per value of this key
  Overrides fixed;                  // [fixed]: applied to every combination first
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;  // [sweep], file order
  // [search]: the layout search space (layout_search.h keys: tp, pp, dp_replicate, ...).
  std::vector<std::pair<std::string, std::vector<std::string>>> search_space;
  std::vector<Overrides> combinations() const;  // the cartesian product, first axis outermost
};

// Reads a sweep file. Values may be strings, integers, floats or booleans; keys are written
// "section.key" (quoted) or as nested tables ([sweep.simulation] num_chips = [...]). Keys
// are checked against the trainer's registry only when applied (apply_override names them).
SweepFile read_sweep_file(const std::string& path);
SweepFile parse_sweep(const std::string& toml_text, const std::string& label);

}  // namespace titan::study
