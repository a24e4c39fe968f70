// Reader of one chip data file (devices/chips/<name>.toml, or a user's --simulation.chip_file)
// into a ChipSpec; used by the chip catalog (chip_catalog.cpp). Format: devices/README.md.
#pragma once

#include <string>

#include "devices/chip_catalog.h"

namespace titan::devices {

// Reads `path`. A `base = "<name>"` key first loads <dir>/<name>.toml (a catalog chip, or a
// template whose name starts with '_') and then applies this file's figures on top. Every
// number needs a source (its own `source`, or its table's); bad syntax, unknown keys, wrong
// units and missing sources are config errors naming the file, the line and the key.
ChipSpec read_chip_file(const std::string& path, const std::string& dir);

// Config error naming `spec.file` when a figure the simulator needs is missing or not
// positive (templates and the cpu device, whose figures are measured, are not checked).
void check_chip(const ChipSpec& spec);

// The catalog's entry for `name` as its file gives it (for "cpu": the static figures the
// measured calibration completes); config error for a name not in the catalog.
const ChipSpec& catalog_chip(const std::string& name);

}  // namespace titan::devices
