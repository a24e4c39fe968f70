#include "collectives/abort_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

namespace titan {

namespace {

std::mutex& dirs_mutex() {
  static std::mutex mu;
  return mu;
}
std::multiset<std::string>& abort_dirs() {
  static std::multiset<std::string> dirs;
  return dirs;
}

// What a signal handler may read: fixed storage, no allocation. Two banks: a change writes
// the bank not in use and then publishes it, so a handler running on another thread never
// reads a half-written path.
constexpr int kSignalDirs = 8;
constexpr size_t kPathBytes = 512;
struct SignalBank {
  char paths[kSignalDirs][kPathBytes];
  int count = 0;
};
SignalBank g_banks[2];
std::atomic<int> g_live_bank{-1};  // -1: nothing registered
std::atomic<int> g_rendezvous_depth{0};
std::atomic<int> g_stop_signal{0};

void publish_for_signals() {  // under dirs_mutex
  const int next = g_live_bank.load() == 0 ? 1 : 0;
  SignalBank& b = g_banks[next];
  b.count = 0;
  for (const std::string& d : abort_dirs()) {
    if (b.count == kSignalDirs || d.size() >= kPathBytes) continue;
    std::memcpy(b.paths[b.count], d.c_str(), d.size() + 1);
    ++b.count;
  }
  g_live_bank.store(b.count ? next : -1);
}

void write_stderr(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

// Only system calls (no opendir: it allocates). The rendezvous folder is flat (gloo's file
// store writes one file per key); a sub-folder is removed if empty.
void remove_dir_signal_safe(const char* path) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const struct dirent64*>(buf + off);
        off += d->d_reclen;
        if (std::strcmp(d->d_name, ".") == 0 || std::strcmp(d->d_name, "..") == 0) continue;
        if (::unlinkat(fd, d->d_name, 0) != 0) ::unlinkat(fd, d->d_name, AT_REMOVEDIR);
      }
    }
    ::close(fd);
    // A peer on this host may have written a key meanwhile: list again.
    if (::rmdir(path) == 0 || errno == ENOENT) return;
  }
}

void remove_dirs_signal_safe() {
  const int live = g_live_bank.load();
  if (live < 0) return;
  const SignalBank& b = g_banks[live];
  for (int i = 0; i < b.count; ++i) remove_dir_signal_safe(b.paths[i]);
}

std::atomic<int> g_rank{-1};

[[noreturn]] void end_by_signal(int signo) {
  remove_dirs_signal_safe();
  write_stderr("titan: ");
  if (const int rank = g_rank.load(); rank >= 0) {
    char digits[16];
    int n = 0;
    for (int r = rank; n == 0 || r > 0; r /= 10) digits[n++] = static_cast<char>('0' + r % 10);
    char text[24] = "rank ";
    int len = 5;
    while (n > 0) text[len++] = digits[--n];
    text[len++] = ':';
    text[len++] = ' ';
    text[len] = 0;
    write_stderr(text);
  }
  write_stderr(signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : "a stop signal");
  write_stderr(" while waiting for peers in the gloo rendezvous (a peer failed or the job is being "
               "ended): rendezvous folder removed, exiting\n");
  ::_exit(128 + signo);
}

void default_then_cleanup(int signo) {
  stop_signal_in_rendezvous(signo);  // returns outside a rendezvous
  remove_dirs_signal_safe();
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

}  // namespace

void remove_on_abort(const std::string& dir) {
  std::lock_guard<std::mutex> lock(dirs_mutex());
  abort_dirs().insert(dir);
  publish_for_signals();
}

void keep_on_abort(const std::string& dir) {
  std::lock_guard<std::mutex> lock(dirs_mutex());
  auto it = abort_dirs().find(dir);
  if (it != abort_dirs().end()) abort_dirs().erase(it);
  publish_for_signals();
}

void remove_abort_dirs() {
  std::lock_guard<std::mutex> lock(dirs_mutex());
  for (const std::string& dir : abort_dirs()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

void remove_abort_dirs_from_signal() { remove_dirs_signal_safe(); }

void stop_signal_in_rendezvous(int signo) {
  g_stop_signal.store(signo);
  if (g_rendezvous_depth.load() > 0) end_by_signal(signo);
}

void watch_stop_signals_for_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int signo : {SIGINT, SIGTERM}) {
      struct sigaction old;
      if (::sigaction(signo, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa;
      std::memset(&sa, 0, sizeof sa);
      sa.sa_handler = default_then_cleanup;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      ::sigaction(signo, &sa, nullptr);
    }
  });
}

RendezvousScope::RendezvousScope(int rank) {
  g_rank.store(rank);
  g_rendezvous_depth.fetch_add(1);
  // After the increment: a signal from now on ends the process in its handler, one before
  // it is seen here.
  if (const int signo = g_stop_signal.load()) end_by_signal(signo);
}

RendezvousScope::~RendezvousScope() { g_rendezvous_depth.fetch_sub(1); }

}  // namespace titan
