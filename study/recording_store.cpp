// RecordingStore (see recording_store.h).
#include "study/recording_store.h"

#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

int add_object(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p, sizeof n);
      const char* name = p + sizeof n;
      const char* desc = name + ((n.n_namesz + 3) & ~3u);
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + n.n_descsz <= end) {
        *out += hex(reinterpret_cast<const unsigned char*>(desc), n.n_descsz) + "\n";
        return 0;
      }
      p = desc + ((n.n_descsz + 3) & ~3u);
    }
  }
  // No build id: the file as it is on disk now (the vDSO and the main program without a note
  // have no path here; neither is rebuilt without the others changing).
  const char* path = info->dlpi_name;
  struct stat st {};
  if (path && *path && ::stat(path, &st) == 0)
    *out += std::string(path) + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtime) + "\n";
  return 0;
}

}  // namespace

std::string RecordingStore::code_identity() {
  std::string ids;
  dl_iterate_phdr(add_object, &ids);
  return ids;
}

RecordingStore::RecordingStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes), code_(code_identity()) {
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
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ++misses;
    return std::nullopt;
  }
  // In one read: entries run to megabytes, and a character at a time was a fifth of a warm
  // study's time.
  f.seekg(0, std::ios::end);
  std::string entry(static_cast<size_t>(std::max<std::streamoff>(0, f.tellg())), '\0');
  f.seekg(0);
  f.read(entry.data(), static_cast<std::streamsize>(entry.size()));
  if (!f) entry.clear();  // fails the checks below
  f.close();
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
  static std::atomic<int64_t> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  const std::string who = code_ + request;
  std::string head(kMagic);
  put_u64(&head, who.size());
  std::string mid;
  put_u64(&mid, bytes.size());
  std::string tail;
  put_u64(&tail, digest(who, bytes));
  bool ok = false;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << head << who << mid << bytes << tail;
    f.close();
    ok = static_cast<bool>(f);
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    ++failed_writes;
    if (!warned_.exchange(true))
      std::fprintf(stderr, "titan-study: warning: recording cache %s: cannot write %s; recordings go uncached\n",
                   dir_.c_str(), path.c_str());
    return;
  }
  if (++writes % 16 == 0) trim();
}

void RecordingStore::trim() {
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
    if (fs::remove(x.path, ec)) total -= x.size;
  }
}

}  // namespace titan::study
