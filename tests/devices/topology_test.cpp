// Tests for topologies: automatic shapes, wraparound rules per generation, multi-slice, and
// clear errors for shapes that cannot hold the chips.
#include "devices/topology.h"

#include "devices/chip_file.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/error_of.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::string error_of(const ChipSpec& c, int64_t n, const std::string& shape) {
  return titan::error_of([&] { make_topology(c, n, shape); }, ErrorKind::kConfig);
}

TEST(Topology, AutomaticTpuV7) {
  Topology t = make_topology(find_chip("tpu-v7"), 8192);
  EXPECT_EQ(t.shape, "16x16x32");
  ASSERT_EQ(t.axes.size(), 3u);
  for (const PhysicalAxis& a : t.axes) {
    EXPECT_TRUE(a.wraparound) << a.name;  // whole cubes: OCS closes every axis
    EXPECT_FALSE(a.switched);
    EXPECT_DOUBLE_EQ(a.link_bytes_per_s, 100e9);
  }
  EXPECT_EQ(t.axes[2].size, 32);
}

TEST(Topology, MultiSliceOverDcnBeyondThePod) {
  Topology t = make_topology(find_chip("tpu-v7"), 65536);
  EXPECT_EQ(t.shape, "8x16x16x32");  // 8 slices of 8192 (pod is 9216)
  ASSERT_EQ(t.axes.size(), 4u);
  EXPECT_EQ(t.axes[3].name, "dcn");
  EXPECT_TRUE(t.axes[3].scale_out);
  EXPECT_TRUE(t.axes[3].switched);
  EXPECT_EQ(t.axes[3].size, 8);

  Topology p = make_topology(find_chip("tpu-v5p"), 8192);  // largest slice 6144
  EXPECT_EQ(p.shape, "2x16x16x16");
  Topology e = make_topology(find_chip("tpu-v5e"), 512);
  EXPECT_EQ(e.shape, "2x16x16");
  EXPECT_DOUBLE_EQ(e.axes.back().link_bytes_per_s, 3.125e9);
}

TEST(Topology, WraparoundRulesPerGeneration) {
  // v5e/v6e: only an axis of 16 wraps.
  Topology e = make_topology(find_chip("tpu-v5e"), 128, "8x16");
  EXPECT_FALSE(e.axes[0].wraparound);
  EXPECT_TRUE(e.axes[1].wraparound);
  // v4: a dim that is a multiple of 4 wraps, per axis.
  Topology v4 = make_topology(find_chip("tpu-v4"), 16, "2x2x4");
  ASSERT_EQ(v4.axes.size(), 3u);
  EXPECT_FALSE(v4.axes[0].wraparound);
  EXPECT_TRUE(v4.axes[2].wraparound);
  // v5p: only full 4x4x4 cubes wrap; a 2x4x4 sub-cube slice has none.
  Topology sub = make_topology(find_chip("tpu-v5p"), 32, "2x4x4");
  for (const PhysicalAxis& a : sub.axes) EXPECT_FALSE(a.wraparound) << a.name;
  Topology cube = make_topology(find_chip("tpu-v5p"), 64, "4x4x4");
  for (const PhysicalAxis& a : cube.axes) EXPECT_TRUE(a.wraparound) << a.name;
}

TEST(Topology, WraparoundIsChipDataThatARenamedChipKeeps) {
  // The rules come from the chip file, not the chip's name: a renamed v4 wraps as v4 does.
  ChipSpec mine = find_chip("tpu-v4");
  mine.name = "my-v4";
  Topology t = make_topology(mine, 16, "2x2x4");
  EXPECT_FALSE(t.axes[0].wraparound);
  EXPECT_TRUE(t.axes[2].wraparound);
  // And a what-if rule changes the torus: v4 with v5p's whole-slice rule has no ring here.
  mine.wraparound = "whole-slice";
  for (const PhysicalAxis& a : make_topology(mine, 16, "2x2x4").axes) EXPECT_FALSE(a.wraparound) << a.name;
  mine.wraparound = "none";
  for (const PhysicalAxis& a : make_topology(mine, 64, "4x4x4").axes) EXPECT_FALSE(a.wraparound) << a.name;
  // Slice rank is chip data too: trn2's 3 axes (instance torus x UltraServer ring).
  ChipSpec t2 = find_chip("trn2");
  t2.name = "my-trn2";
  EXPECT_EQ(make_topology(t2, 64, "4x4x4").axes.size(), 3u);
}

TEST(Topology, TorusChipWithoutWrapRuleIsAnError) {
  ChipSpec c = find_chip("tpu-v4");
  c.wraparound = "sometimes";
  const std::string m = titan::error_of([&] { check_chip(c); }, ErrorKind::kConfig);
  EXPECT_NE(m.find("fabric.wraparound"), std::string::npos) << m;
}

TEST(Topology, TrainiumAndGpu) {
  Topology t1 = make_topology(find_chip("trn1"), 64);
  EXPECT_EQ(t1.shape, "4x4x4");  // 4 instances of a 4x4 torus over EFA
  EXPECT_TRUE(t1.axes[0].wraparound);
  EXPECT_EQ(t1.axes[2].name, "efa");
  Topology t2 = make_topology(find_chip("trn2"), 128);
  EXPECT_EQ(t2.shape, "2x4x4x4");  // 2 UltraServers (4x4 torus x ring of 4) over EFA
  EXPECT_EQ(t2.axes[2].name, "z");
  EXPECT_TRUE(t2.axes[2].wraparound);
  Topology g = make_topology(find_chip("h100"), 64);
  EXPECT_EQ(g.shape, "8x8");
  EXPECT_TRUE(g.axes[0].switched);
  EXPECT_DOUBLE_EQ(g.axes[0].link_bytes_per_s, 450e9);
  EXPECT_EQ(g.axes[1].name, "ib");
  Topology nvl = make_topology(find_chip("b200"), 144, "nvl72");
  EXPECT_EQ(nvl.shape, "2x72");
  EXPECT_DOUBLE_EQ(nvl.axes[0].link_bytes_per_s, 900e9);
}

TEST(Topology, ShapesThatCannotHoldTheChips) {
  ChipSpec v7 = find_chip("tpu-v7");
  std::string m = error_of(v7, 8192, "16x16x16");
  EXPECT_NE(m.find("holds 4096 chips, which cannot hold num_chips = 8192"), std::string::npos) << m;
  EXPECT_NE(m.find("'2x16x16x16'"), std::string::npos) << m;  // suggests multi-slice
  m = error_of(v7, 7680, "16x16x30");
  EXPECT_NE(m.find("multiple of 4"), std::string::npos) << m;
  m = error_of(find_chip("tpu-v5p"), 8192, "16x16x32");
  EXPECT_NE(m.find("exceeds the largest tpu-v5p slice of 6144 chips"), std::string::npos) << m;
  m = error_of(find_chip("tpu-v5e"), 256, "32x8");
  EXPECT_NE(m.find("not a valid tpu-v5e slice"), std::string::npos) << m;
  m = error_of(v7, 8192, "16x16");
  EXPECT_NE(m.find("expected 3 dimensions"), std::string::npos) << m;
  m = error_of(v7, 8192, "16xax32");
  EXPECT_NE(m.find("not of the form"), std::string::npos) << m;
  m = error_of(find_chip("h100"), 12, "");
  EXPECT_NE(m.find("whole NVLink domains"), std::string::npos) << m;
}

TEST(Topology, UserShapeWithSliceCount) {
  Topology t = make_topology(find_chip("tpu-v7"), 16384, "2x16x16x32");
  EXPECT_EQ(t.num_chips, 16384);
  EXPECT_EQ(t.axes.back().size, 2);
  EXPECT_TRUE(t.axes.back().scale_out);
}

// The slice shapes come in the order a plain count over every factor gives (ties in the
// automatic choice go to the first), and every valid one is there.
TEST(Topology, SliceShapesAreEveryValidFactorisationInOrder) {
  for (const auto& [name, rank] : std::vector<std::pair<std::string, int>>{{"tpu-v7", 3}, {"tpu-v5e", 2}}) {
    const ChipSpec& chip = find_chip(name);
    for (int64_t n : {1, 12, 64, 256, 4096, 8192}) {
      std::vector<std::vector<int64_t>> expected;
      for (int64_t a = 1; a <= n; ++a) {
        if (n % a) continue;
        std::vector<std::vector<int64_t>> shapes;
        if (rank == 2) shapes.push_back({a, n / a});
        else
          for (int64_t b = 1; b <= n / a; ++b)
            if ((n / a) % b == 0) shapes.push_back({a, b, n / a / b});
        for (const auto& d : shapes) {
          bool valid = true;
          try {
            make_topology_from_dims(chip, d, 1);
          } catch (const Error&) {
            valid = false;
          }
          if (valid) expected.push_back(d);
        }
      }
      EXPECT_EQ(valid_slice_shapes(chip, n), expected) << name << " " << n;
      if (n == 64) EXPECT_FALSE(expected.empty()) << name;
    }
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
