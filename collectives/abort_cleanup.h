// Folders a failed job must not leave behind (gloo's rendezvous folder in /tmp): abort_job
// (watchdog.h) removes them before it takes the job down, on whichever rank fails first.
// Their owner adds them while they exist. Implemented in watchdog.cpp, next to abort_job.
#pragma once

#include <string>

namespace titan {

void remove_on_abort(const std::string& dir);
void keep_on_abort(const std::string& dir);

}  // namespace titan
