#include "trainer/stop_signals.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "collectives/abort_cleanup.h"

namespace titan {
namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_loop_started = 0;

void on_signal(int signo) {
  // A rank waiting in the gloo rendezvous ends here, removing the folder (abort_cleanup.h).
  titan::stop_signal_in_rendezvous(signo);
  if (!g_loop_started) {
    // Before the train loop nothing is trained or being saved that a step end would finish,
    // and start-up may block for good (MPI_Init waiting for a rank that never comes, a hung
    // file system): noting the signal for a step end made `timeout`'s SIGTERM do nothing.
    titan::remove_abort_dirs_from_signal();
    const char msg[] = "titan: stop signal during start-up (before the first step): exiting now\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + signo);
  }
  if (g_signal != 0) {
    // Second signal: the user does not want to wait for the step or the save to finish.
    // Only async-signal-safe calls here.
    const char msg[] = "titan: second stop signal: exiting now (a save in progress is left as a .tmp folder)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + signo);
  }
  g_signal = signo;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // collectives and file writes go on; the loop checks at step ends
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_signal; }

void note_training_loop_started() { g_loop_started = 1; }

std::string signal_name(int signo) {
  if (signo == SIGINT) return "SIGINT";
  if (signo == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signo);
}

}  // namespace titan
