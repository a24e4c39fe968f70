// Test hooks of the checkpointer, set through TITAN_CHECKPOINT_FAULT
// (docs/checkpoint_format.md): they let tests kill a save half way or end a job as if
// preempted. Used by checkpoint.cpp only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace titan {

// kill_during_save:STEP: rank 0 SIGKILLs itself after this many pieces of that step's save;
// -1 when the hook does not apply.
int64_t kill_after_for(int64_t step, int rank, size_t pieces);

// exit_after_step:N: the job stops after a full save of step N; -1 when unset.
int64_t exit_after_step();

}  // namespace titan
