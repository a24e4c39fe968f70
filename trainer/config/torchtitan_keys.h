// TorchTitan's key spellings as titan reads them: keys titan implements under another name
// (older TorchTitan releases, [debug], [experimental]) and keys titan knows from TorchTitan but
// does not implement (profiling, compile, float8, tensorboard...). Used by config_loader.cpp
// so that TorchTitan's own train_configs load unchanged.
#pragma once

#include <string>

namespace titan {

// titan's "section.key" for a TorchTitan spelling of it ("training.batch_size" ->
// "training.local_batch_size"); `full_key` itself when it is not an alias.
std::string titan_key_for(const std::string& full_key);

// True for a TorchTitan key titan does not implement; such keys are listed in one warning.
bool torchtitan_only_key(const std::string& full_key);

// A TorchTitan value titan spells differently, as titan's value ("c4" -> "corpus"); `value`
// itself when none. Sets *note to what the user should know when the meaning changes.
std::string titan_value_for(const std::string& full_key, const std::string& value, std::string* note);

}  // namespace titan
