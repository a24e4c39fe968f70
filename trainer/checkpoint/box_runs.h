// Geometry of saved pieces: a box of a global tensor and a flat range of the box's
// flattening, turned into runs contiguous in the global tensor. Used by the checkpoint
// reader to reshard (read any piece from any saved layout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan {

// Throws (a damaged checkpoint) unless the box lies inside the tensor and the flat range
// [flat, flat + n) inside the box.
void check_box(const std::vector<int64_t>& global, const std::vector<int64_t>& off, const std::vector<int64_t>& shape,
               int64_t flat, int64_t n, const std::string& where);

// A stretch of `len` elements contiguous in the global flat tensor (from `global`) and in a
// box-flat range (from `local`, relative to the range's start).
struct Run {
  int64_t global, local, len;
};

// Elements [flat, flat + n) of the flattened box as contiguous global runs, in increasing
// global order.
std::vector<Run> box_runs(const std::vector<int64_t>& global, const std::vector<int64_t>& off,
                          const std::vector<int64_t>& shape, int64_t flat, int64_t n);

}  // namespace titan
