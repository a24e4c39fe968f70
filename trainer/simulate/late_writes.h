// Writes the recorder learns of after the op that made them was recorded (a composite attention
// backward's gradients, first seen when the next backward node takes them): added to their ops
// once the step is over (trace_recorder.cpp, TraceRecorder::finish).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "devices/step_simulator.h"

namespace titan {

// (compute op number, tensor it also wrote).
using LateWrites = std::vector<std::pair<int64_t, devices::TensorUse>>;

// `trace` again, each late write on its op (Trace::compute links the data flow anew), and its
// storage resizes; its storage table is left for the caller to fill.
devices::Trace with_late_writes(devices::Trace&& trace, LateWrites writes);

}  // namespace titan
