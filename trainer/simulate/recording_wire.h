// Recorded steps as bytes: how a recorder process (study/recorder_pool.h) hands a recording
// back to the study. A trace goes as its ops, issues and waits and is rebuilt through
// Trace::compute / issue / wait, which derive the data flow (op positions, producers, last
// readers) and work handles exactly as the recording did; a handle that comes out different
// is an error. The chip and the placement do not travel: they follow from the config, and
// the receiver sets them (simulated_chip, place_on_device) as record_step does. Tests:
// tests/study/recorder_pool_test.cpp (a round-tripped step replays to the identical step).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trainer/simulate/shard_resize.h"
#include "trainer/simulate/simulate.h"

namespace titan {

std::string encode_step(const RecordedStep& step);
// Throws titan::Error naming what is damaged (a truncated or inconsistent message).
RecordedStep decode_step(std::string_view bytes);

// A probe: its step, degree and FSDP's notes (shard_notes.h); cfg as for make_probe.
std::string encode_probe(const ProbeRecording& probe);
ProbeRecording decode_probe(std::string_view bytes, const JobConfig& cfg);

}  // namespace titan
