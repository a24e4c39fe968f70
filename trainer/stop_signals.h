// SIGINT / SIGTERM during training: the handler only records the signal; the train loop
// (trainer/train.cpp) stops at the next step boundary, all ranks alike, after finishing the
// save in flight. A second signal ends the process at once. Used by the train loop and main.
#pragma once

#include <string>

namespace titan {

// Installs the handlers for SIGINT and SIGTERM (idempotent).
void install_stop_handlers();

// The signal received so far (SIGINT or SIGTERM), or 0.
int stop_signal();

// From here on a first signal is noted for the next step end; before (start-up), it ends the
// process at once with 128 + signo, as nothing needs finishing and start-up may block.
void note_training_loop_started();

// "SIGINT", "SIGTERM", else "signal N".
std::string signal_name(int signo);

// Exit status of a job stopped by `signo`, as a shell reports a process it ended: 128 + signo.
inline int stop_exit_code(int signo) { return 128 + signo; }

}  // namespace titan
