#include "trainer/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "trainer/checkpoint/box_runs.h"
#include "trainer/checkpoint/checkpoint_hdf5.h"
#include "trainer/checkpoint/checkpoint_meta.h"

namespace titan {
namespace {

// Checksums cover fixed blocks of each dataset so that a partial (resharding) read verifies
// only the blocks it touches. 4 MiB of fp32.
constexpr int64_t kCrcBlockBytes = int64_t(4) << 20;

struct DtypeInfo {
  const char* name;
  hid_t native;  // bfloat16/float16 have no HDF5 predefined type: stored as uint16 bit patterns
};

DtypeInfo dtype_info(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return {"float32", H5T_NATIVE_FLOAT};
    case torch::kFloat64: return {"float64", H5T_NATIVE_DOUBLE};
    case torch::kBFloat16: return {"bfloat16", H5T_NATIVE_UINT16};
    case torch::kFloat16: return {"float16", H5T_NATIVE_UINT16};
    case torch::kInt64: return {"int64", H5T_NATIVE_INT64};
    case torch::kUInt8: return {"uint8", H5T_NATIVE_UINT8};
    default: TITAN_FAIL("checkpoint: cannot store dtype ", t);
  }
}

torch::ScalarType dtype_from(const std::string& n, const std::string& where) {
  for (auto t : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16, torch::kInt64, torch::kUInt8}) {
    if (n == dtype_info(t).name) return t;
  }
  TITAN_FAIL(where, ": unknown dtype '", n, "'");
}

uint32_t crc_of(const uint8_t* p, int64_t bytes) {
  return static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(bytes)));
}

std::vector<uint32_t> block_crcs(const torch::Tensor& t, int64_t block_elems) {
  std::vector<uint32_t> out;
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  const int64_t es = t.element_size(), n = t.numel();
  for (int64_t b = 0; b < n; b += block_elems) out.push_back(crc_of(p + b * es, std::min(block_elems, n - b) * es));
  return out;
}

h5::Handle ensure_group(hid_t file, const std::string& path) {
  // "optimizer/exp_avg": create each level once.
  std::string sofar;
  h5::Handle g;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    sofar += (sofar.empty() ? "" : "/") + path.substr(start, end - start);
    g = h5::exists(file, sofar) ? h5::open_group(file, sofar) : h5::create_group(file, sofar);
    start = end + 1;
  }
  return g;
}

}  // namespace

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  TITAN_CHECK(fd >= 0, "checkpoint: cannot open ", path, " for fsync");
  const int rc = ::fsync(fd);
  ::close(fd);
  TITAN_CHECK(rc == 0, "checkpoint: fsync failed on ", path);
}

namespace {

int64_t write_rank_file_unnamed(const std::string& path, const CheckpointMeta& meta,
                                const std::vector<TensorPiece>& pieces, const torch::Tensor& rng, int64_t kill_after) {
  h5::Handle file = h5::create_file(path);
  write_checkpoint_meta(file.get(), meta);
  int64_t bytes = 0, written = 0;
  for (auto& p : pieces) {
    if (kill_after >= 0 && written == kill_after) {
      // Test hook: die like a preempted job, half way through the tensors.
      H5Fflush(file.get(), H5F_SCOPE_GLOBAL);
      std::raise(SIGKILL);
    }
    auto data = p.data.contiguous();
    TITAN_CHECK(data.dim() == 1 && data.device().is_cpu(), "checkpoint: piece ", p.name, " must be 1-D on CPU");
    if (data.numel() == 0) continue;  // a rank whose shard is all padding has nothing of it
    const DtypeInfo info = dtype_info(data.scalar_type());
    h5::Handle g = ensure_group(file.get(), p.group);
    h5::Handle ds = h5::write_dataset(g.get(), p.name, info.native, data.data_ptr(), data.numel());
    const int64_t block = kCrcBlockBytes / data.element_size();
    h5::set_attr(ds.get(), "dtype", std::string(info.name));
    h5::set_attr(ds.get(), "global_shape", p.global_shape);
    h5::set_attr(ds.get(), "flat_offset", p.flat_offset);
    h5::set_attr(ds.get(), "box_offset",
                 p.box_offset.empty() ? std::vector<int64_t>(p.global_shape.size(), 0) : p.box_offset);
    h5::set_attr(ds.get(), "box_shape", p.box_shape.empty() ? p.global_shape : p.box_shape);
    h5::set_attr(ds.get(), "crc32_block_elems", block);
    h5::set_attr(ds.get(), "crc32", block_crcs(data, block));
    bytes += data.nbytes();
    ++written;
  }
  if (rng.defined()) {
    h5::Handle g = ensure_group(file.get(), "rng");
    auto r = rng.contiguous();
    h5::Handle ds = h5::write_dataset(g.get(), "torch_cpu", H5T_NATIVE_UINT8, r.data_ptr(), r.numel());
    h5::set_attr(ds.get(), "crc32_block_elems", kCrcBlockBytes);
    h5::set_attr(ds.get(), "crc32", block_crcs(r, kCrcBlockBytes));
  }
  h5::close_file(file, path);
  fsync_path(path);
  return bytes;
}

}  // namespace

int64_t write_rank_file(const std::string& path, const CheckpointMeta& meta, const std::vector<TensorPiece>& pieces,
                        const torch::Tensor& rng, int64_t kill_after) {
  try {
    return write_rank_file_unnamed(path, meta, pieces, rng, kill_after);
  } catch (const Error& e) {
    // HDF5's messages name the dataset, not the file: a full disk on one rank of many must
    // say which file (and so which step, folder and rank) could not be written.
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw Error(e.kind(), e.where(), "checkpoint: cannot write " + path + ": " + e.what());
  }
}

struct CheckpointReader::File {
  std::string path;
  int64_t bytes = 0;
  h5::Handle handle;
};

namespace {

// titan writes datasets contiguous and uncompressed, so a dataset's elements lie in its file:
// a declared length beyond the file's size is damage, refused before anything is allocated.
void check_length_in_file(int64_t length, int64_t element_bytes, int64_t file_bytes, const std::string& where) {
  TITAN_CHECK(length >= 0 && length <= file_bytes / element_bytes, where, ": declares ", length, " elements of ",
              element_bytes, " bytes, more than the file's ", file_bytes, " bytes (damaged file)");
}

// Checksum blocks of `block` elements over `length`: block > 0, and no overflow on the way.
void check_crc_table(int64_t length, int64_t block, size_t entries, const std::string& where) {
  TITAN_CHECK(block > 0 && int64_t(entries) == length / block + (length % block != 0 ? 1 : 0), where,
              ": checksum table does not match its length");
}

}  // namespace

struct CheckpointReader::Piece {
  int64_t file = 0;
  std::string dataset;  // "group/name"
  std::vector<int64_t> global_shape, box_offset, box_shape;
  int64_t flat_offset = 0, length = 0, block = 0;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<uint32_t> crc;
};

CheckpointReader::CheckpointReader(const std::string& dir, const std::vector<std::string>& files,
                                   const std::vector<int64_t>& sizes)
    : dir_(dir) {
  namespace fs = std::filesystem;
  TITAN_CHECK(!files.empty(), dir, ": lists no rank files");
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string path = (fs::path(dir) / files[r]).string();
    std::error_code ec;
    TITAN_CHECK(fs::exists(path, ec), path, ": shard file missing");
    const auto bytes = fs::file_size(path, ec);
    TITAN_CHECK(!ec, path, ": cannot read its size (", ec.message(), ")");
    const auto got = static_cast<int64_t>(bytes);
    if (r < sizes.size() && sizes[r] >= 0) {
      TITAN_CHECK(got == sizes[r], path, ": ", got, " bytes, the checkpoint recorded ", sizes[r], " (truncated?)");
    }
    auto f = std::make_unique<File>();
    f->path = path;
    f->bytes = got;
    f->handle = h5::open_file_readonly(path);
    CheckpointMeta m = read_checkpoint_meta(f->handle.get(), path);
    TITAN_CHECK(m.rank == int64_t(r) && m.world_size == int64_t(files.size()), path, ": records rank ", m.rank,
                " of ", m.world_size, ", expected rank ", r, " of ", files.size());
    if (r == 0) {
      meta_ = m;
    } else {
      TITAN_CHECK(m.step == meta_.step && m.model_args_json == meta_.model_args_json, path,
                  ": belongs to another checkpoint (step ", m.step, " vs ", meta_.step, ")");
    }
    for (const char* group : {"model", "model_buffers", "optimizer/exp_avg", "optimizer/exp_avg_sq"}) {
      if (!h5::exists(f->handle.get(), group)) continue;
      h5::Handle g = h5::open_group(f->handle.get(), group);
      for (auto& name : h5::children(g.get())) {
        h5::Handle ds = h5::open_dataset(g.get(), name);
        Piece p;
        p.file = static_cast<int64_t>(r);
        p.dataset = std::string(group) + "/" + name;
        p.global_shape = h5::attr_ints(ds.get(), "global_shape");
        p.flat_offset = h5::attr_int(ds.get(), "flat_offset");
        p.length = h5::dataset_length(ds.get());
        p.block = h5::attr_int(ds.get(), "crc32_block_elems");
        p.dtype = dtype_from(h5::attr_string(ds.get(), "dtype"), path + ":" + p.dataset);
        p.crc = h5::attr_u32s(ds.get(), "crc32");
        check_length_in_file(p.length, torch::elementSize(p.dtype), f->bytes, path + ":" + p.dataset);
        check_crc_table(p.length, p.block, p.crc.size(), path + ":" + p.dataset);
        p.box_offset = h5::attr_ints(ds.get(), "box_offset");
        p.box_shape = h5::attr_ints(ds.get(), "box_shape");
        check_box(p.global_shape, p.box_offset, p.box_shape, p.flat_offset, p.length, path + ":" + p.dataset);
        index_[p.dataset].push_back(std::move(p));
      }
    }
    files_.push_back(std::move(f));
  }
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::has(const std::string& group, const std::string& name) const {
  return index_.count(group + "/" + name) != 0;
}

std::vector<std::string> CheckpointReader::names(const std::string& group) const {
  std::vector<std::string> out;
  const std::string prefix = group + "/";
  for (auto& [k, v] : index_) {
    if (k.compare(0, prefix.size(), prefix) == 0 && k.find('/', prefix.size()) == std::string::npos)
      out.push_back(k.substr(prefix.size()));
  }
  return out;
}

const std::vector<int64_t>& CheckpointReader::global_shape(const std::string& group, const std::string& name) const {
  auto it = index_.find(group + "/" + name);
  TITAN_CHECK(it != index_.end(), dir_, ": has no tensor ", group, "/", name);
  return it->second.front().global_shape;
}

void CheckpointReader::read(const std::string& group, const std::string& name, int64_t flat_offset,
                            torch::Tensor out, const std::vector<int64_t>& box_offset,
                            const std::vector<int64_t>& box_shape) {
  const std::string key = group + "/" + name;
  auto it = index_.find(key);
  TITAN_CHECK(it != index_.end(), dir_, ": has no tensor ", key);
  TITAN_CHECK(out.dim() == 1 && out.is_contiguous(), "checkpoint read: target must be 1-D contiguous");
  const auto& global = it->second.front().global_shape;
  const auto off = box_offset.empty() ? std::vector<int64_t>(global.size(), 0) : box_offset;
  const auto shape = box_shape.empty() ? global : box_shape;
  check_box(global, off, shape, flat_offset, out.numel(), "checkpoint read of " + key);
  const auto want = box_runs(global, off, shape, flat_offset, out.numel());
  int64_t covered = 0;
  for (auto& p : it->second) {
    TITAN_CHECK(p.global_shape == global, dir_, ": ", key, " has pieces of different global shapes");
    // Overlaps of the wanted runs with this piece's runs (both in increasing global order):
    // (position in the dataset, position in `out`, length).
    const auto have = box_runs(global, p.box_offset, p.box_shape, p.flat_offset, p.length);
    std::vector<Run> segs;  // global field reused as the dataset position
    for (size_t a = 0, b = 0; a < want.size() && b < have.size();) {
      const int64_t lo = std::max(want[a].global, have[b].global);
      const int64_t hi = std::min(want[a].global + want[a].len, have[b].global + have[b].len);
      if (lo < hi) segs.push_back({have[b].local + lo - have[b].global, want[a].local + lo - want[a].global, hi - lo});
      if (want[a].global + want[a].len <= have[b].global + have[b].len) ++a; else ++b;
    }
    if (segs.empty()) continue;
    int64_t a = segs.front().global, b = a;
    for (auto& sg : segs) a = std::min(a, sg.global), b = std::max(b, sg.global + sg.len);
    // Whole checksum blocks around the dataset range [a, b).
    const int64_t first = a / p.block, last = (b - 1) / p.block;
    const int64_t start = first * p.block, end = std::min(p.length, (last + 1) * p.block);
    auto buf = torch::empty({end - start}, torch::TensorOptions().dtype(p.dtype));
    const File& f = *files_[p.file];
    {
      const auto slash = p.dataset.rfind('/');
      h5::Handle g = h5::open_group(f.handle.get(), p.dataset.substr(0, slash));
      h5::Handle ds = h5::open_dataset(g.get(), p.dataset.substr(slash + 1));
      h5::read_range(ds.get(), dtype_info(p.dtype).native, start, end - start, buf.data_ptr());
    }
    bytes_read_ += buf.nbytes();
    const auto* bytes = static_cast<const uint8_t*>(buf.data_ptr());
    const int64_t es = buf.element_size();
    for (int64_t k = first; k <= last; ++k) {
      const int64_t s = k * p.block, n = std::min(p.block, p.length - s);
      TITAN_CHECK(crc_of(bytes + (s - start) * es, n * es) == p.crc[k], f.path, ":", p.dataset,
                  ": checksum mismatch in elements [", s, ", ", s + n, ") (corrupted data)");
    }
    if (segs.size() == 1) {
      out.narrow(0, segs[0].local, segs[0].len).copy_(buf.narrow(0, segs[0].global - start, segs[0].len));
    } else {
      auto src = buf.to(out.scalar_type());
      const int64_t oes = out.element_size();
      auto* dst = static_cast<uint8_t*>(out.data_ptr());
      const auto* from = static_cast<const uint8_t*>(src.data_ptr());
      for (auto& sg : segs) std::memcpy(dst + sg.local * oes, from + (sg.global - start) * oes, sg.len * oes);
    }
    for (auto& sg : segs) covered += sg.len;
  }
  TITAN_CHECK(covered == out.numel(), dir_, ": tensor ", key, " elements [", flat_offset, ", ",
              flat_offset + out.numel(), ") of box ", c10::IntArrayRef(off), "+", c10::IntArrayRef(shape),
              " are only ", covered, " covered by the saved shards (missing shard?)");
}

torch::Tensor CheckpointReader::read_full(const std::string& group, const std::string& name) {
  const auto& shape = global_shape(group, name);
  int64_t numel = 1, saved = 0;
  for (auto s : shape) numel *= s;  // fits: check_box checked every piece's global shape
  for (auto& p : index_.at(group + "/" + name)) {
    saved += std::min(p.length, numel - saved);  // p.length >= 0; never past numel
    if (saved >= numel) break;
  }
  // Allocate only what the pieces can fill: a damaged global_shape must not ask for terabytes.
  TITAN_CHECK(saved >= numel, dir_, ": tensor ", group, "/", name, " of ", numel, " elements has only ", saved,
              " saved (missing shard or damaged global_shape)");
  auto out = torch::empty({numel}, torch::TensorOptions().dtype(index_.at(group + "/" + name).front().dtype));
  read(group, name, 0, out);
  return out.view(shape);
}

torch::Tensor CheckpointReader::rng(int64_t rank) {
  TITAN_CHECK(rank >= 0 && rank < int64_t(files_.size()), "checkpoint: no rank ", rank);
  const File& f = *files_[rank];
  if (!h5::exists(f.handle.get(), "rng")) return {};
  h5::Handle g = h5::open_group(f.handle.get(), "rng");
  h5::Handle ds = h5::open_dataset(g.get(), "torch_cpu");
  const int64_t n = h5::dataset_length(ds.get());
  check_length_in_file(n, 1, f.bytes, f.path + ":rng/torch_cpu");
  const auto crc = h5::attr_u32s(ds.get(), "crc32");
  const int64_t block = h5::attr_int(ds.get(), "crc32_block_elems");
  check_crc_table(n, block, crc.size(), f.path + ":rng/torch_cpu");
  auto out = torch::empty({n}, torch::kUInt8);
  h5::read_range(ds.get(), H5T_NATIVE_UINT8, 0, n, out.data_ptr());
  TITAN_CHECK(block_crcs(out, block) == crc, f.path, ": rng/torch_cpu checksum mismatch");
  return out;
}

}  // namespace titan
