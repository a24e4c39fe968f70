// Recorder processes (see recorder_pool.h).
#include "study/recorder_pool.h"

#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "common/error.h"
#include "study/recording_cache.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/recording_wire.h"
#include "trainer/step/trainer.h"

namespace titan::study {

namespace {

class InProcess : public Recorder {
 public:
  RecordedStep record(const JobConfig& cfg) override {
    warm(cfg);
    return record_step(cfg);
  }
  ProbeRecording probe(const JobConfig& cfg, int64_t first_degree) override {
    warm(cfg);
    return record_probe(cfg, first_degree);
  }

 private:
  void warm(const JobConfig& cfg) {
    if (warmed_) return;
    try {
      (void)record_step(cfg);
      warmed_ = true;
    } catch (...) {
      // a config that fails to record warms nothing: the next call tries again
    }
  }
  bool warmed_ = false;
};

// Messages: an 8-byte length, then the bytes.
bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}
bool send_message(int fd, const std::string& m) {
  const uint64_t n = m.size();
  return send_all(fd, reinterpret_cast<const char*>(&n), sizeof n) &&
         send_all(fd, m.data(), m.size());
}
bool recv_message(int fd, std::string* m) {
  uint64_t n = 0;
  if (!recv_all(fd, reinterpret_cast<char*>(&n), sizeof n)) return false;
  m->resize(n);
  return recv_all(fd, m->data(), n);
}

// Fields of a message: lengths before strings; the first byte tells what it is.
enum Kind : char { kRecord = 'r', kProbe = 'p', kOk = 'k', kTitanError = 'e', kOtherError = 'x' };

void put_str(std::string* m, const std::string& s) {
  const uint64_t n = s.size();
  m->append(reinterpret_cast<const char*>(&n), sizeof n);
  m->append(s);
}
std::string get_str(std::string_view m, size_t* pos) {
  uint64_t n = 0;
  TITAN_CHECK(*pos + sizeof n <= m.size(), "recorder message: truncated");
  std::memcpy(&n, m.data() + *pos, sizeof n);
  *pos += sizeof n;
  TITAN_CHECK(n <= m.size() - *pos, "recorder message: truncated");
  std::string s(m.substr(*pos, n));
  *pos += n;
  return s;
}

// The recorder process: requests in, recordings (or the error) out, until the study closes
// its end.
[[noreturn]] void serve(int fd) {
  // A recording allocates and frees a trace's worth of memory: keep it mapped between
  // recordings rather than hand it back to the kernel and fault it in (zeroed) again.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
  // Memory is not on the wire: the study walks it when it decodes a recording.
  set_recording_walks_memory(false);
  InProcess recorder;
  std::string request;
  while (recv_message(fd, &request)) {
    std::string reply;
    try {
      size_t pos = 1;
      const std::string first = get_str(request, &pos), toml = get_str(request, &pos),
                        key = get_str(request, &pos);
      JobConfig cfg;
      apply_toml(cfg, toml, "recording request");
      // The config must arrive as the study has it: what determines the recording is equal.
      TITAN_CHECK(RecordingCache::key(cfg) == key,
                  "recorder process: the config changed on its way as TOML");
      const std::string bytes = request[0] == kProbe
                                    ? encode_probe(recorder.probe(cfg, std::stoll(first)))
                                    : encode_step(recorder.record(cfg));
      reply.push_back(kOk);
      reply += bytes;
    } catch (const Error& e) {
      reply.assign(1, kTitanError);
      reply.push_back(e.kind() == ErrorKind::kConfig ? 'c' : 'r');
      put_str(&reply, e.where());
      put_str(&reply, e.what());
    } catch (const std::exception& e) {
      reply.assign(1, kOtherError);
      put_str(&reply, e.what());
    }
    if (!send_message(fd, reply)) break;
  }
  _exit(0);  // not exit(): the parent's atexit handlers and static destructors are not ours to run
}

// The study's side of one recorder process.
class Remote : public Recorder {
 public:
  Remote(pid_t pid, int fd, std::shared_ptr<RecordingStore> store)
      : pid_(pid), fd_(fd), store_(std::move(store)) {}
  ~Remote() override {
    ::close(fd_);  // the process sees the end of its requests and exits
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  RecordedStep record(const JobConfig& cfg) override {
    RecordedStep s = decode_step(call(kRecord, cfg, 0));
    s.chip = simulated_chip(cfg);
    // As record_step places (its placement was checked there, where it was recorded).
    s.placement = devices::place_on_device(s.chip, cfg.simulation.num_chips, mesh_dims(s.dims),
                                           cfg.simulation.topology);
    return s;
  }
  double cpu_seconds() const override {
    // /proc/PID/stat: utime and stime, in clock ticks, are the 12th and 13th fields after
    // the parenthesised command name.
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream in(stat.substr(close + 1));
    std::string field;
    double ticks = 0;
    for (int i = 1; i <= 13 && in >> field; ++i)
      if (i >= 12) ticks += std::stod(field);
    return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  ProbeRecording probe(const JobConfig& cfg, int64_t first_degree) override {
    ProbeRecording p = decode_probe(call(kProbe, cfg, first_degree), cfg);
    p.step.chip =
        simulated_chip(with_shard_degree(cfg, p.degree));  // unplaced, as record_probe leaves it
    return p;
  }

 private:
  std::string call(Kind kind, const JobConfig& cfg, int64_t first_degree) {
    const std::string key = RecordingCache::key(cfg);
    // What the recording depends on (the TOML also holds keys only replays read), and the
    // tokenizer file, whose vocabulary sizes the model when nothing else does: the key names
    // the file, not what it holds, and a run from another folder may name another file.
    std::string stored(1, kind);
    if (store_) {
      put_str(&stored, std::to_string(first_degree));
      put_str(&stored, key);
      const std::string& tok = cfg.model.tokenizer_path;
      if (!tok.empty() && tok != "byte")
        put_str(&stored, RecordingStore::file_identity(std::filesystem::absolute(tok).string()));
      if (std::optional<std::string> bytes = store_->load(stored)) return std::move(*bytes);
    }
    std::string request(1, kind);
    put_str(&request, std::to_string(first_degree));
    put_str(&request, config_to_toml(cfg));
    put_str(&request, key);
    std::string reply;
    if (!send_message(fd_, request) || !recv_message(fd_, &reply) || reply.empty()) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      TITAN_FAIL("recorder process ", pid_, " ended",
                 done == pid_ && WIFSIGNALED(status)
                     ? " by signal " + std::to_string(WTERMSIG(status))
                     : std::string(),
                 " while recording a ", kind == kProbe ? "probe" : "step", " of ", layout_of(cfg));
    }
    size_t pos = 1;
    if (reply[0] == kOk) {
      std::string bytes = reply.substr(1);
      if (store_) store_->save(stored, bytes);
      return bytes;
    }
    if (reply[0] == kTitanError) {
      const ErrorKind k = reply.at(1) == 'c' ? ErrorKind::kConfig : ErrorKind::kRuntime;
      pos = 2;
      std::string where = get_str(reply, &pos);
      throw Error(k, where, get_str(reply, &pos));
    }
    TITAN_CHECK(reply[0] == kOtherError, "recorder process ", pid_, ": a reply of unknown kind");
    throw std::runtime_error(get_str(reply, &pos));
  }
  static std::string layout_of(const JobConfig& cfg) {
    try {
      return layout_string(parallel_dims(cfg, cfg.simulation.num_chips));
    } catch (const std::exception&) {
      return "an unresolved layout";
    }
  }
  pid_t pid_;
  int fd_;
  std::shared_ptr<RecordingStore> store_;
};

int thread_count() {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;  // cannot tell: treat as threaded
  int n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

}  // namespace

std::unique_ptr<Recorder> in_process_recorder() { return std::make_unique<InProcess>(); }

std::vector<std::unique_ptr<Recorder>> start_recorder_processes(int n, std::shared_ptr<RecordingStore> store) {
  std::vector<std::unique_ptr<Recorder>> out;
  if (n <= 0 || thread_count() != 1) return out;
  std::vector<int> ours;  // the study's ends, which a later recorder must not keep open
  for (int i = 0; i < n; ++i) {
    int fds[2];
    // Out of descriptors or processes: the study goes on with the recorders it has, saying so.
    auto fewer = [&](const char* what) {
      std::fprintf(stderr, "titan-study: warning: %s failed (%s): %d of %d recorder processes started\n", what,
                   std::strerror(errno), i, n);
    };
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      fewer("socketpair");
      break;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      fewer("fork");
      ::close(fds[0]), ::close(fds[1]);
      break;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a study that dies takes its recorders along
      for (int fd : ours) ::close(fd);
      ::close(fds[0]);
      serve(fds[1]);
    }
    ::close(fds[1]);
    ours.push_back(fds[0]);
    out.push_back(std::make_unique<Remote>(pid, fds[0], store));
  }
  return out;
}

}  // namespace titan::study
