// A rank file's root attributes (checkpoint_io.h's CheckpointMeta: format, step, mesh, model
// and config, scalar training state), written and read apart from its tensors. Used by
// checkpoint_io.cpp only.
#pragma once

#include <string>

#include "trainer/checkpoint/checkpoint_hdf5.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace titan {

void write_checkpoint_meta(hid_t file, const CheckpointMeta& m);
// Refuses a file that is not a titan checkpoint or of another format version, naming `path`.
CheckpointMeta read_checkpoint_meta(hid_t file, const std::string& path);

}  // namespace titan
