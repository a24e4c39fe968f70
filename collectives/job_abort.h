// Ending the whole job with an exit status of the caller's choosing, as abort_job()
// (watchdog.h) does with the collective layer's own status. titan-train uses it for a
// config error seen on a multi-rank job: returning from main would finalize MPI cleanly,
// and mpirun would then leave the other ranks waiting in their next collective until the
// timeout instead of ending them at once. Implemented in watchdog.cpp, next to abort_job.
#pragma once

#include <string>

namespace titan {

// Prints "titan: <message>" on stderr, removes the folders registered with remove_on_abort
// and ends every rank through the backend's hook (MPI_Abort with exit_code), or this process
// alone when no backend has started yet. Never returns.
[[noreturn]] void abort_job_with_status(const std::string& message, int exit_code);

}  // namespace titan
