// Hourly prices per chip: the inputs of the cost-per-million-tokens column. Read from a data
// file (default study/prices.toml: a price, its currency unit and its source per device),
// overridable by a user's file. Used by results_io.cpp and the cross-vendor table.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace titan::study {

struct Price {
  double usd_per_chip_hour = 0;
  std::string source;  // where the figure comes from, or "assumed: why"
  // "list" (a provider's published on-demand rate), "reserved" (a published committed-use
  // rate) or "assumed" (no published rate: the rule used is in source).
  std::string kind;
};

struct PriceTable {
  std::map<std::string, Price> by_device;
  std::string file;  // where it was read from
  std::optional<Price> find(const std::string& device) const;
};

std::string default_prices_path();  // <source dir>/study/prices.toml
// Reads [device] tables with usd_per_chip_hour, kind and source (all required).
PriceTable read_prices(const std::string& path);

// US dollars per million tokens at `tokens_per_s_per_chip`.
double usd_per_million_tokens(const Price& p, double tokens_per_s_per_chip);

}  // namespace titan::study
