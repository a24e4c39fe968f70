// RecordingStore (see recording_store.h).
#include "study/recording_store.h"

#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/error.h"

namespace titan::study {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "titan-recording 1\n";

// Not cryptographic: it names entries (the full request is kept in the entry and compared) and
// catches damage. Eight bytes a step, since entries run to megabytes and a warm study reads
// hundreds of them.
uint64_t digest(std::string_view a, std::string_view b = {}) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t w) {
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  };
  for (std::string_view s : {a, b}) {
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      mix(w);
    }
    uint64_t tail = 0;
    if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
    mix(tail ^ (static_cast<uint64_t>(s.size()) << 56));
  }
  return h;
}

void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }
bool get_u64(std::string_view in, size_t* pos, uint64_t* v) {
  if (in.size() - *pos < sizeof *v) return false;
  std::memcpy(v, in.data() + *pos, sizeof *v);
  *pos += sizeof *v;
  return true;
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {digits[p[i] >> 4], digits[p[i] & 15]};
  return s;
}

}  // namespace

std::string RecordingStore::file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + " (cannot stat)";
  return path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_ino) + " " +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

namespace {

int add_object(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    // Notes in an 8-aligned segment pad name and description to 8 bytes, else to 4.
    const size_t align = ph.p_align == 8 ? 8 : 4;
    auto padded = [align](size_t n) { return (n + align - 1) & ~(align - 1); };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (static_cast<size_t>(end - p) >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p, sizeof n);
      const char* name = p + sizeof n;
      if (padded(n.n_namesz) > static_cast<size_t>(end - name)) break;
      const char* desc = name + padded(n.n_namesz);
      if (n.n_descsz > static_cast<size_t>(end - desc)) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        *out += hex(reinterpret_cast<const unsigned char*>(desc), n.n_descsz) + "\n";
        return 0;
      }
      if (padded(n.n_descsz) >= static_cast<size_t>(end - desc)) break;  // the segment's last note
      p = desc + padded(n.n_descsz);
    }
  }
  // No build id. The main program has no name here, and it is the object rebuilt most often
  // (every titan library is linked into it): /proc/self/exe. The vDSO has no file.
  const char* path = info->dlpi_name;
  if (path && *path) *out += RecordingStore::file_identity(path) + "\n";
  else if (out->empty()) *out += RecordingStore::file_identity("/proc/self/exe") + "\n";
  return 0;
}

}  // namespace

std::string RecordingStore::code_identity() {
  std::string ids;
  dl_iterate_phdr(add_object, &ids);
  return ids;
}

RecordingStore::RecordingStore(std::string dir, uint64_t max_bytes, std::string code)
    : dir_(std::move(dir)), max_bytes_(max_bytes), code_(std::move(code)) {
  TITAN_CONFIG_CHECK(!dir_.empty(), "recording cache: the folder is an empty string");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  TITAN_CONFIG_CHECK(!ec && fs::is_directory(dir_), "recording cache ", dir_,
                     ": cannot be created (", ec ? ec.message() : "not a directory", ")");
  trim();
}

std::string RecordingStore::path_of(const std::string& request) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.rec", static_cast<unsigned long long>(digest(code_, request)));
  return dir_ + "/" + name;
}

std::optional<std::string> RecordingStore::load(const std::string& request) {
  const std::string path = path_of(request);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    ++misses;
    return std::nullopt;
  }
  // Something else under an entry's name (a folder, a FIFO) is left alone, and missed.
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > max_bytes_) {
    ++damaged;
    return std::nullopt;
  }
  // In one read: entries run to megabytes, and a character at a time was a fifth of a warm
  // study's time.
  std::string entry(static_cast<size_t>(st.st_size), '\0');
  {
    std::ifstream f(path, std::ios::binary);
    f.read(entry.data(), static_cast<std::streamsize>(entry.size()));
    if (!f || f.peek() != std::char_traits<char>::eof()) entry.clear();  // changed under us: fails the checks
  }
  const std::string_view e(entry);
  size_t pos = kMagic.size();
  uint64_t who_n = 0, bytes_n = 0, sum = 0;
  bool ok = e.substr(0, kMagic.size()) == kMagic && get_u64(e, &pos, &who_n) && who_n <= e.size() - pos;
  const std::string_view who = ok ? e.substr(pos, who_n) : std::string_view();
  pos += ok ? who_n : 0;
  ok = ok && get_u64(e, &pos, &bytes_n) && bytes_n <= e.size() - pos;
  const std::string_view bytes = ok ? e.substr(pos, bytes_n) : std::string_view();
  pos += ok ? bytes_n : 0;
  ok = ok && get_u64(e, &pos, &sum) && pos == e.size() && sum == digest(who, bytes) &&
       who.size() == code_.size() + request.size() && who.substr(0, code_.size()) == code_ &&
       who.substr(code_.size()) == request;
  if (!ok) {
    ++damaged;
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  ++hits;
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recently used, for trim()
  const size_t at = static_cast<size_t>(bytes.data() - entry.data());
  entry.resize(at + bytes.size());
  entry.erase(0, at);
  return entry;
}

void RecordingStore::save(const std::string& request, const std::string& bytes) {
  const std::string path = path_of(request);
  const std::string who = code_ + request;
  std::string head(kMagic);
  put_u64(&head, who.size());
  std::string mid;
  put_u64(&mid, bytes.size());
  std::string tail;
  put_u64(&tail, digest(who, bytes));
  // A name no other writer has, whatever its host or pid namespace (a shared folder).
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  bool ok = fd >= 0;
  if (ok) {
    ::fchmod(fd, 0644);  // mkstemp's 0600 would hide entries from the folder's other users
    std::FILE* f = ::fdopen(fd, "wb");
    ok = f != nullptr;
    for (const std::string* part : std::initializer_list<const std::string*>{&head, &who, &mid, &bytes, &tail})
      ok = ok && std::fwrite(part->data(), 1, part->size(), f) == part->size();
    ok = (f ? std::fclose(f) == 0 : ::close(fd) == 0) && ok;
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    if (fd >= 0) fs::remove(tmp, ec);
    ++failed_writes;
    if (!warned_.exchange(true))
      std::fprintf(stderr, "titan-study: warning: recording cache %s: cannot write %s; recordings go uncached\n",
                   dir_.c_str(), path.c_str());
    return;
  }
  if (++writes % 16 == 0) trim();
}

void RecordingStore::trim() {
  // One trim at a time in this process: two would each count the other's removals as still
  // there and remove more than the limit asks.
  std::lock_guard<std::mutex> lock(trim_mu_);
  struct Entry {
    fs::file_time_type used;
    uint64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& d : fs::directory_iterator(dir_, ec)) {
    std::error_code e0;
    // A write's temporary that outlived its process (killed mid-write): no one renames it.
    if (d.path().filename().string().find(".rec.tmp.") != std::string::npos && d.last_write_time(e0) < stale) {
      fs::remove(d.path(), e0);
      continue;
    }
    if (d.path().extension() != ".rec") continue;
    std::error_code e1, e2;
    const uint64_t size = d.file_size(e1);
    const auto used = d.last_write_time(e2);
    if (e1 || e2) continue;
    entries.push_back({used, size, d.path()});
    total += size;
  }
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& x : entries) {
    if (total <= max_bytes_) break;
    fs::remove(x.path, ec);
    if (!ec) total -= x.size;  // removed, or already gone (another study's trim)
  }
}

}  // namespace titan::study
