#include "trainer/checkpoint/step_folders.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint_io.h"

namespace titan {
namespace fs = std::filesystem;
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An old step beyond keep_latest_k. Its marker goes first, so that a removal that stops half
// way (a file the OS will not delete) leaves a folder that resume skips, never one that looks
// complete but lacks rank files. A removal that fails is a warning, not an error: the new
// checkpoint is committed, and ending the run over an old one (it used to, exit 1) would
// throw away the training since the last save.
void prune_step_folder(const std::string& path) {
  std::error_code ec;
  fs::remove(fs::path(path) / "COMPLETE", ec);
  if (!ec) fs::remove_all(path, ec);
  if (!ec) return;
  std::fprintf(stderr,
               "titan: checkpoint: WARNING cannot remove old checkpoint %s (checkpoint.keep_latest_k): %s; %s, "
               "training goes on\n",
               path.c_str(), ec.message().c_str(),
               fs::exists(fs::path(path) / "COMPLETE") ? "it stays loadable" : "what is left is no longer loaded");
  std::fflush(stderr);
}

}  // namespace

std::string rank_file(int64_t r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05lld.h5", static_cast<long long>(r));
  return buf;
}

std::string step_name(int64_t step) { return "step-" + std::to_string(step); }

void write_text_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    TITAN_CHECK(f.good(), "checkpoint: cannot write ", tmp);
  }
  fsync_path(tmp);
  fs::rename(tmp, path);
}

namespace {

std::vector<fs::path> tmp_save_folders(const std::string& folder) {
  std::vector<fs::path> tmp;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return tmp;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().filename().string().rfind(".tmp-step-", 0) == 0) tmp.push_back(e.path());
  }
  return tmp;
}

// A tmp folder whose marker is written and whose rank files all have the sizes it lists: the
// commit that made it stopped after its marker, before (or while) it replaced step-N.
bool holds_whole_save(const fs::path& dir) {
  try {
    const CompleteMarker m = read_complete_marker(dir.string());
    for (size_t i = 0; i < m.rank_files.size(); ++i) {
      std::error_code ec;
      const auto bytes = fs::file_size(dir / m.rank_files[i], ec);
      if (ec || (m.rank_file_bytes[i] >= 0 && static_cast<int64_t>(bytes) != m.rank_file_bytes[i])) return false;
    }
  } catch (const Error&) {
    return false;
  }
  return true;
}

// Puts a whole save in place of step-N: what is left of an older step-N goes first (rename
// cannot replace a folder that holds files). Until the rename, the whole save is the tmp folder.
void move_into_place(const fs::path& tmp_dir, const fs::path& final_dir) {
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_path(final_dir.parent_path().string());
}

}  // namespace

std::vector<std::string> finish_interrupted_commits(const std::string& folder) {
  std::vector<std::string> finished;
  for (auto& p : tmp_save_folders(folder)) {
    if (!holds_whole_save(p)) continue;
    const fs::path final_dir = fs::path(folder) / p.filename().string().substr(5);  // ".tmp-step-N" -> "step-N"
    move_into_place(p, final_dir);
    finished.push_back(final_dir.string());
  }
  return finished;
}

int remove_unfinished_saves(const std::string& folder) {
  finish_interrupted_commits(folder);
  int removed = 0;
  std::error_code ec;
  for (auto& p : tmp_save_folders(folder)) removed += fs::remove_all(p, ec) > 0 ? 1 : 0;
  return removed;
}

bool is_model_only(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "COMPLETE");
  nlohmann::json marker = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return marker.is_object() && marker.value("model_only", false);
}

CompleteMarker read_complete_marker(const std::string& dir) {
  std::ifstream f(fs::path(dir) / "COMPLETE");
  TITAN_CHECK(f.good(), dir, ": no COMPLETE marker (the save did not finish)");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_complete_marker(text, dir + "/COMPLETE");
}

CompleteMarker parse_complete_marker(const std::string& text, const std::string& where) {
  const nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(m.is_object(), where, " is malformed: not a JSON object");
  auto list = [&](const char* key) -> const nlohmann::json& {
    auto it = m.find(key);
    TITAN_CHECK(it != m.end() && it->is_array(), where, ": \"", key, "\" is missing or not a list");
    return *it;
  };
  CompleteMarker out;
  for (const auto& f : list("rank_files")) {
    TITAN_CHECK(f.is_string(), where, ": \"rank_files\" holds a non-string entry");
    const std::string name = f.get<std::string>();
    // A file name inside the step folder, never a path out of it.
    TITAN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                where, ": \"rank_files\" entry \"", name, "\" is not a file name");
    out.rank_files.push_back(name);
  }
  TITAN_CHECK(!out.rank_files.empty(), where, ": \"rank_files\" is empty");
  for (const auto& b : list("rank_file_bytes")) {
    TITAN_CHECK(b.is_number_integer() && b.get<int64_t>() >= -1, where,
                ": \"rank_file_bytes\" holds an entry that is not a byte count");
    out.rank_file_bytes.push_back(b.get<int64_t>());
  }
  TITAN_CHECK(out.rank_file_bytes.size() == out.rank_files.size(), where, ": ",
              out.rank_files.size(), " rank files but ", out.rank_file_bytes.size(), " sizes");
  return out;
}

std::vector<StepFolder> list_step_folders(const std::string& folder) {
  std::vector<StepFolder> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory()) continue;
    const std::string num = name.substr(5);
    // Not a step titan wrote (step-abc, or more digits than an int64 holds): left alone,
    // neither loaded nor pruned, instead of std::stoll's bare "stoll" ending the job.
    if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos) continue;
    out.push_back({std::stoll(num), e.path().string(), fs::exists(e.path() / "COMPLETE", ec)});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.step > b.step; });
  return out;
}

void mark_rank_file_done(const std::string& tmp_dir, int rank) {
  const fs::path f = fs::path(tmp_dir) / rank_file(rank);
  write_text_durably(f.string() + ".done", std::to_string(fs::file_size(f)) + "\n");
}

void commit_step_folder(const StepCommit& job) {
  const double deadline = now_s() + job.timeout_s;
  std::vector<int64_t> sizes(job.world, -1);
  std::vector<std::string> files;
  // Rank 0's own file is durable now; others report through their done files.
  {
    const std::string path = (fs::path(job.tmp_dir) / rank_file(0)).string();
    sizes[0] = static_cast<int64_t>(fs::file_size(path));
  }
  for (int r = 0; r < job.world; ++r) files.push_back(rank_file(r));
  for (int r = 1; r < job.world; ++r) {
    const fs::path done = fs::path(job.tmp_dir) / (rank_file(r) + ".done");
    std::error_code ec;
    while (!fs::exists(done, ec)) {
      TITAN_CHECK(now_s() < deadline, "checkpoint: rank ", r, " did not finish its file for step ", job.step,
                  " within ", job.timeout_s, " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream f(done);
    f >> sizes[r];
    TITAN_CHECK(f && sizes[r] >= 0, "checkpoint: unreadable ", done.string());
    fs::remove(done);
  }
  std::error_code ec;
  if (fs::exists(fs::path(job.tmp_dir) / "model.safetensors", ec)) files.push_back("model.safetensors");
  const fs::path final_dir = fs::path(job.folder) / step_name(job.step);
  nlohmann::json marker = {{"format", "titan-checkpoint"},
                           {"format_version", kCheckpointFormatVersion},
                           {"step", job.step},
                           {"world_size", job.world},
                           {"model_only", job.model_only},
                           {"rank_files", std::vector<std::string>(files.begin(), files.begin() + job.world)},
                           {"rank_file_bytes", sizes},
                           {"extra_files", std::vector<std::string>(files.begin() + job.world, files.end())}};
  // The marker goes in before the rename: an older step-N (a re-run from an earlier
  // load_step) is removed to make room, and a kill or error between that removal and the
  // rename used to leave neither save loadable. Now the tmp folder is whole from here on, and
  // finish_interrupted_commits puts it in place at the next start.
  write_text_durably((fs::path(job.tmp_dir) / "COMPLETE").string(), marker.dump(1) + "\n");
  fsync_path(job.tmp_dir);
  move_into_place(job.tmp_dir, final_dir);
  if (job.keep_latest_k > 0) {  // prune the oldest full checkpoints beyond k (0 keeps all)
    int64_t kept = 0;
    for (auto& s : list_step_folders(job.folder)) {
      if (!s.complete || is_model_only(s.path)) continue;  // exports are neither counted nor pruned
      if (++kept > job.keep_latest_k) prune_step_folder(s.path);
    }
  }
}

void check_folder_writable(const std::string& folder, int64_t rank) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  TITAN_CONFIG_CHECK(!ec, "checkpoint.folder ", folder, ": cannot be created (", ec.message(), ")");
  TITAN_CONFIG_CHECK(fs::is_directory(folder), "checkpoint.folder ", folder, ": is not a folder");
  const fs::path probe = fs::path(folder) / (".write-test-" + rank_file(rank));
  {
    std::ofstream out(probe);
    out << "titan";
    out.flush();
    TITAN_CONFIG_CHECK(out.good(), "checkpoint.folder ", folder,
                       ": is not writable (checked at start, before the first save)");
  }
  fs::remove(probe, ec);
}

void lock_checkpoint_folder(const std::string& folder) {
  static std::mutex mu;
  static auto* held = new std::map<std::string, int>;  // lock file -> its descriptor, kept open
  const std::string path = (fs::path(folder) / ".titan-lock").string();
  std::lock_guard<std::mutex> lock(mu);
  auto it = held->find(path);
  if (it != held->end()) {
    // Still the same file (a test may have removed and recreated the folder)?
    struct stat a {}, b {};
    if (::fstat(it->second, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
      return;
    ::close(it->second);
    held->erase(it);
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TITAN_CONFIG_CHECK(fd >= 0, "checkpoint.folder ", folder, ": cannot create its lock file ", path, " (",
                     std::strerror(errno), ")");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char who[256] = {0};
    const ssize_t n = ::pread(fd, who, sizeof who - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(who, static_cast<size_t>(n)) : std::string("another process");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    TITAN_CONFIG_CHECK(err != EWOULDBLOCK, "checkpoint.folder ", folder, " is in use by another job (", holder,
                       " holds ", path, "): two jobs saving into one folder overwrite each other's steps; "
                       "give this job its own job.dump_folder or checkpoint.folder, or wait for the other to end");
    TITAN_CONFIG_FAIL("checkpoint.folder ", folder, ": cannot lock ", path, " (", std::strerror(err), ")");
  }
  char host[128] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  (*held)[path] = fd;
}

}  // namespace titan
