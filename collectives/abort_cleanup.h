// Folders a failed job must not leave behind (gloo's rendezvous folder in /tmp): abort_job
// (watchdog.h) removes them before it takes the job down, on whichever rank fails first.
// Their owner adds them while they exist. Implemented in abort_cleanup.cpp.
//
// A rank waiting in a rendezvous for a peer that died before it got there is ended by its
// launcher: plain mpirun sends SIGTERM, then SIGKILL one second later. titan-train's stop
// handler (trainer/stop_signals.h) used to only note the signal for the next step end, which
// a rank stuck in the rendezvous never reaches, so the folder outlived the job. Hence
// stop_signal_in_rendezvous(): from a SIGINT/SIGTERM handler, it removes the folders and
// ends the process when the signal lands inside a RendezvousScope, and makes the next
// scope do so when it lands before (a rank still loading when the job is killed).
#pragma once

#include <string>

namespace titan {

void remove_on_abort(const std::string& dir);
void keep_on_abort(const std::string& dir);

// Removes every registered folder now (abort_job's clean-up; not for signal handlers).
void remove_abort_dirs();

// Async-signal-safe. Records `signo`; inside a RendezvousScope removes the registered
// folders, prints one line and _exits with 128 + signo.
void stop_signal_in_rendezvous(int signo);

// Async-signal-safe: removes the registered folders (for a handler that ends the process).
void remove_abort_dirs_from_signal();

// Makes sure SIGINT / SIGTERM reach stop_signal_in_rendezvous: installs a handler where
// the disposition is still the default (a process without the trainer's stop handler);
// that handler removes the folders and then dies of the signal as the default would.
void watch_stop_signals_for_cleanup();

// Marks a stretch in which this process may block on peers that will never come (the gloo
// store's creation and every group's rendezvous). Entering it after a stop signal arrived
// ends the process as stop_signal_in_rendezvous does. `rank` goes into that line.
class RendezvousScope {
 public:
  explicit RendezvousScope(int rank);
  ~RendezvousScope();
  RendezvousScope(const RendezvousScope&) = delete;
  RendezvousScope& operator=(const RendezvousScope&) = delete;
};

}  // namespace titan
