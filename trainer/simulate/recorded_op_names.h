// Op names as the trace recorder's callbacks (recorder_callbacks.cpp) see them: each distinct
// name once, with what recorded_op_kinds.h and the recorder's scopes say of it, so that a
// callback reads flags instead of building a std::string and hashing it into several sets for
// every aten call (a recorded step makes tens of thousands of calls).
#pragma once

#include <string>

#include "devices/interned_name.h"

namespace titan {

struct RecordedOpName {
  devices::InternedName name;  // what the recorded op is named: a pointer copy, not a string's
  bool aten = false;         // "aten::..."
  bool query = false;        // query_op: never recorded
  bool view = false;         // view_ops
  bool child = false;        // counts_as_child
  bool reduction = false;    // reduction_ops
  bool movement = false;     // movement_ops
  bool writes_only = false;  // writes_only
  bool in_place = false;     // ends in '_' (add_, copy_)
  bool mm = false;           // aten::mm, aten::bmm
  bool addmm = false;        // aten::addmm, aten::baddbmm
  bool copy = false;         // aten::copy_
  // The profiling scopes the recorder keeps or reads (trace_recorder.h and the headers named
  // in recorder_callbacks.cpp).
  bool block_scope = false;
  bool kept_output_scope = false;
  bool ring_attention_block_scope = false;
  bool attention_scope = false;
  bool grouped_matmul_scope = false;
  bool fused_cross_entropy_scope = false;
  bool fused_kernel_grads_scope = false;
};

// The entry of `name` (a RecordFunction's name), made on first sight and kept for the process.
// Thread safe; the returned reference stays valid.
const RecordedOpName& recorded_op_name(const char* name);

}  // namespace titan
