// A config's values as TOML text: one key's value (config_help's defaults, config_to_toml) and
// the whole config (config_to_toml, declared in config_loader.h beside the reading side).
#pragma once

#include <string>

#include "trainer/config/config_keys.h"

namespace titan {

// The key's current value as TOML writes it (strings quoted, whole doubles with ".0").
std::string value_text(const KeySpec& s);

}  // namespace titan
