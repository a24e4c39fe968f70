// Damaged checkpoint metadata, as the checkpoint fuzz target (tests/trainer/fuzz/) found or
// reading the reader showed: every case must end in a titan::Error naming what is wrong, never
// signed overflow, a huge allocation, a hang or a write past a buffer.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>

#include <torch/torch.h>

#include "common/error.h"
#include "tests/error_of.h"
#include "trainer/checkpoint/box_runs.h"
#include "trainer/checkpoint/checkpoint_hdf5.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/checkpoint/step_folders.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("titan_ckpt_damage_" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// One rank file holding one model piece (and a small RNG state); returns its path.
std::string write_one(const std::string& dir, TensorPiece piece) {
  CheckpointMeta meta;
  meta.mesh_dims = {"world"};
  meta.mesh_shape = {1};
  const std::string path = dir + "/rank-00000.h5";
  write_rank_file(path, meta, {piece}, torch::arange(16, torch::kUInt8));
  return path;
}

TensorPiece small_piece(std::vector<int64_t> global_shape) {
  TensorPiece p;
  p.group = "model";
  p.name = "w";
  p.global_shape = std::move(global_shape);
  p.data = torch::arange(12, torch::kFloat32);
  return p;
}

TEST(CheckpointDamage, BoxSizesThatOverflowAreRefused) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  // The fuzzer's first finding: flat + n overflowed before the comparison.
  EXPECT_NE(error_of([&] { check_box({big}, {0}, {big}, big, 12, "f:w"); }).find("outside its box"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_box({10}, {big}, {5}, 0, 1, "f:w"); }).find("box outside the tensor"),
            std::string::npos);
  const int64_t d = int64_t(1) << 40;
  EXPECT_NE(error_of([&] { check_box({d, d}, {0, 0}, {d, d}, 0, 1, "f:w"); })
                .find("more elements than int64 holds"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_box({3, 4}, {1, 0}, {2, 4}, 2, 6, "f:w"); }), "no error");
}

TEST(CheckpointDamage, FullReadOfAShapeThePiecesCannotFillAllocatesNothing) {
  const std::string dir = fresh_dir("shape");
  // 2^40 elements declared, 12 saved: reading it whole would ask for 4 TiB.
  write_one(dir, small_piece({int64_t(1) << 20, int64_t(1) << 20}));
  CheckpointReader r(dir, {"rank-00000.h5"}, {-1});
  const std::string msg = error_of([&] { r.read_full("model", "w"); });
  EXPECT_NE(msg.find("of 1099511627776 elements has only 12 saved"), std::string::npos) << msg;
}

TEST(CheckpointDamage, NewFilesCarryMetadataChecksums) {
  const std::string dir = fresh_dir("format");
  const std::string path = write_one(dir, small_piece({3, 4}));
  h5::Handle f = h5::open_file_readonly(path);
  H5F_info2_t info;
  ASSERT_GE(H5Fget_info2(f.get(), &info), 0);
  EXPECT_GE(info.super.version, 2u) << "superblock v2+ (HDF5 1.8 formats) has checksums";
  CheckpointReader r(dir, {"rank-00000.h5"}, {-1});
  EXPECT_TRUE(torch::equal(r.read_full("model", "w").reshape({-1}), torch::arange(12, torch::kFloat32)));
  EXPECT_EQ(r.rng(0).numel(), 16);
}

// Rewrites attributes of a written file, as damage would leave them.
class Damage {
 public:
  explicit Damage(const std::string& path) : file_(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose) {}
  hid_t file() const { return file_.get(); }

 private:
  h5::Handle file_;
};

TEST(CheckpointDamage, RngChecksumBlockOfZeroIsRefusedNotLoopedOn) {
  const std::string dir = fresh_dir("rng");
  const std::string path = write_one(dir, small_piece({3, 4}));
  {
    Damage d(path);
    h5::Handle g = h5::open_group(d.file(), "rng");
    h5::Handle ds = h5::open_dataset(g.get(), "torch_cpu");
    h5::set_attr(ds.get(), "crc32_block_elems", int64_t(0));
  }
  CheckpointReader r(dir, {"rank-00000.h5"}, {-1});
  const std::string msg = error_of([&] { r.rng(0); });
  EXPECT_NE(msg.find("rng/torch_cpu: checksum table does not match its length"), std::string::npos) << msg;
}

TEST(CheckpointDamage, AStringAttributeHoldingTwoStringsIsRefused) {
  const std::string dir = fresh_dir("strings");
  const std::string path = write_one(dir, small_piece({3, 4}));
  {
    // H5Aread of two variable-length strings into one pointer wrote past it before.
    Damage d(path);
    H5Adelete(d.file(), "format");
    h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    hsize_t two[1] = {2};
    h5::Handle space(H5Screate_simple(1, two, nullptr), H5Sclose);
    h5::Handle a(H5Acreate2(d.file(), "format", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    const char* v[2] = {"titan-checkpoint", "titan-checkpoint"};
    ASSERT_GE(H5Awrite(a.get(), type.get(), v), 0);
  }
  const std::string msg = error_of([&] { CheckpointReader(dir, {"rank-00000.h5"}, {-1}); });
  EXPECT_NE(msg.find("attribute format on / is not a single string"), std::string::npos) << msg;
}

TEST(CheckpointDamage, ADatasetLongerThanItsFileIsRefused) {
  const std::string dir = fresh_dir("length");
  const std::string path = write_one(dir, small_piece({3, 4}));
  {
    // A dataset whose declared extent no file byte backs (allocated lazily by HDF5).
    Damage d(path);
    h5::Handle g = h5::open_group(d.file(), "model");
    hsize_t n[1] = {hsize_t(1) << 40};
    h5::Handle space(H5Screate_simple(1, n, nullptr), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_LATE);
    h5::Handle ds(H5Dcreate2(g.get(), "huge", H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                  H5Dclose);
    ASSERT_TRUE(ds.valid());
    h5::set_attr(ds.get(), "dtype", std::string("float32"));
    h5::set_attr(ds.get(), "global_shape", std::vector<int64_t>{int64_t(1) << 40});
    h5::set_attr(ds.get(), "flat_offset", int64_t(0));
    h5::set_attr(ds.get(), "box_offset", std::vector<int64_t>{0});
    h5::set_attr(ds.get(), "box_shape", std::vector<int64_t>{int64_t(1) << 40});
    h5::set_attr(ds.get(), "crc32_block_elems", int64_t(1) << 40);
    h5::set_attr(ds.get(), "crc32", std::vector<uint32_t>{0});
  }
  const std::string msg = error_of([&] { CheckpointReader(dir, {"rank-00000.h5"}, {-1}); });
  EXPECT_NE(msg.find("model/huge: declares 1099511627776 elements of 4 bytes, more than the file's"),
            std::string::npos)
      << msg;
}

TEST(CheckpointDamage, CompleteMarkerErrorsNameTheKey) {
  const std::string w = "step-3/COMPLETE";
  auto msg = [&](const std::string& text) { return error_of([&] { parse_complete_marker(text, w); }); };
  EXPECT_NE(msg("[1,2]").find("step-3/COMPLETE is malformed: not a JSON object"), std::string::npos);
  EXPECT_NE(msg("{\"rank_files\":[\"a.h5\"").find("not a JSON object"), std::string::npos);
  EXPECT_NE(msg(R"({"rank_file_bytes":[1]})").find(R"("rank_files" is missing or not a list)"), std::string::npos);
  EXPECT_NE(msg(R"({"rank_files":[1],"rank_file_bytes":[1]})").find("non-string entry"), std::string::npos);
  EXPECT_NE(msg(R"({"rank_files":["../../etc/x"],"rank_file_bytes":[1]})").find("is not a file name"),
            std::string::npos);
  EXPECT_NE(msg(R"({"rank_files":["a.h5"],"rank_file_bytes":["1"]})").find("not a byte count"), std::string::npos);
  EXPECT_NE(msg(R"({"rank_files":["a.h5","b.h5"],"rank_file_bytes":[1]})").find("2 rank files but 1 sizes"),
            std::string::npos);
  EXPECT_NE(msg(R"({"rank_files":[],"rank_file_bytes":[]})").find("\"rank_files\" is empty"), std::string::npos);
  const CompleteMarker ok = parse_complete_marker(R"({"rank_files":["rank-00000.h5"],"rank_file_bytes":[-1]})", w);
  EXPECT_EQ(ok.rank_files, std::vector<std::string>{"rank-00000.h5"});
  EXPECT_EQ(ok.rank_file_bytes, std::vector<int64_t>{-1});
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
