// Ending the whole job with an exit status of the caller's choosing, as abort_job()
// (watchdog.h) does with the collective layer's own status. titan-train uses it for a
// config error seen on a multi-rank job: returning from main would finalize MPI cleanly,
// and mpirun would then leave the other ranks waiting in their next collective until the
// timeout instead of ending them at once. Implemented in watchdog.cpp, next to abort_job,
// and (abort_job_agreeing) in shared_failure.cpp.
#pragma once

#include <string>

namespace titan {

// Prints "titan: <message>" on stderr, removes the folders registered with remove_on_abort
// and ends every rank through the backend's hook (MPI_Abort with exit_code), or this process
// alone when no backend has started yet. Never returns.
[[noreturn]] void abort_job_with_status(const std::string& message, int exit_code);

// The same without the line (the caller printed what it had to say).
[[noreturn]] void end_job(int exit_code);

// For a failure that every rank may hit alike (the same config file with the same mistake):
// under Open MPI's launcher the ranks that failed compare their messages over MPI for at
// most a few seconds, point to point on tags nothing else uses, so that a rank that did not
// fail is never waited for (a gloo job's healthy ranks never even start MPI). When every
// rank failed with the same message, rank 0 prints "titan: all N ranks: <message>" and all
// exit with exit_code; otherwise each failed rank prints "titan: <rank_prefix><message>"
// and ends the job as abort_job_with_status does. Never returns.
[[noreturn]] void abort_job_agreeing(const std::string& rank_prefix, const std::string& message,
                                     int exit_code);

}  // namespace titan
