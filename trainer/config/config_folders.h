// Folders that config keys name (job.dump_folder, profiling.save_traces_folder): created at
// start, and a path that cannot be one is a config error naming the key, not a bare
// std::filesystem "cannot create directories" at the first write, minutes into a job.
#pragma once

#include <string>

namespace titan {

// Creates `path` (and its parents) if missing; throws a config error naming `key` and the
// OS reason when it cannot.
void create_folder_for(const std::string& key, const std::string& path);

}  // namespace titan
