// Loading a JobConfig: defaults, then a TOML file, then --section.key overrides, each value
// checked against the key's type and allowed range. Used by main and by tests.
#pragma once

#include <string>
#include <vector>

#include "trainer/config/job_config.h"

namespace titan {

// Parses argv (without the program name): --config FILE, --section.key VALUE or
// --section.key=VALUE. Throws a config titan::Error naming the file, line, key and value.
JobConfig load_job_config(const std::vector<std::string>& args);

// Reads only TOML text (file_label names it in errors); used by load_job_config and tests.
void apply_toml(JobConfig& cfg, const std::string& toml_text, const std::string& file_label);

// Applies one "section.key" = "value" given as text, as the command line does.
void apply_override(JobConfig& cfg, const std::string& key, const std::string& value);

// Checks relations between keys (e.g. global batch divisible by local batch).
void validate(const JobConfig& cfg);

// Every key with its type, default and allowed values, for --help.
std::string config_help();

// The whole config as TOML text (print_config, and saved next to checkpoints).
std::string config_to_toml(const JobConfig& cfg);

}  // namespace titan
