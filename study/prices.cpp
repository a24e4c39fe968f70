// Chip prices (see prices.h).
#include "study/prices.h"

#include <toml++/toml.h>

#include "common/error.h"

namespace titan::study {

std::optional<Price> PriceTable::find(const std::string& device) const {
  auto it = by_device.find(device);
  if (it == by_device.end()) return std::nullopt;
  return it->second;
}

std::string default_prices_path() { return std::string(TITAN_SOURCE_DIR) + "/study/prices.toml"; }

PriceTable read_prices(const std::string& path) {
  PriceTable t;
  t.file = path;
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    TITAN_CONFIG_CHECK(false, "price file ", path, " line ", e.source().begin.line, ": ", e.description());
  }
  for (auto& [k, v] : tbl) {
    const std::string device(k.str());
    const std::string where = "price file " + path + ": [" + device + "]";
    auto* d = v.as_table();
    TITAN_CONFIG_CHECK(d, where, " must be a table with usd_per_chip_hour and source");
    auto price = (*d)["usd_per_chip_hour"].value<double>();
    auto source = (*d)["source"].value<std::string>();
    TITAN_CONFIG_CHECK(price && *price > 0, where, ".usd_per_chip_hour must be a number > 0");
    TITAN_CONFIG_CHECK(source && !source->empty(), where, ".source must say where the price comes from");
    auto kind = (*d)["kind"].value<std::string>();
    TITAN_CONFIG_CHECK(kind && (*kind == "list" || *kind == "reserved" || *kind == "assumed"), where,
                       ".kind must be \"list\", \"reserved\" or \"assumed\"", kind ? ", got \"" + *kind + "\"" : "");
    for (const auto& [key, node] : *d) {
      const std::string k(key.str());
      TITAN_CONFIG_CHECK(k == "usd_per_chip_hour" || k == "source" || k == "kind", where, ": unknown key '", k,
                         "' (known: usd_per_chip_hour kind source)");
    }
    t.by_device[device] = {*price, *source, *kind};
  }
  return t;
}

double usd_per_million_tokens(const Price& p, double tokens_per_s_per_chip) {
  if (tokens_per_s_per_chip <= 0) return 0;
  return p.usd_per_chip_hour / 3600.0 / tokens_per_s_per_chip * 1e6;
}

}  // namespace titan::study
