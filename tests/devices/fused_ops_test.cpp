// The trainer's fused CPU kernels as ops (devices/fused_ops.h) and what they cost: on an
// accelerator the memory-bound roofline of their bytes (the linear a matmul); on the cpu device
// the rate its calibration measured for that kernel; the calibration file's [kernel_rates].
#include "devices/fused_ops.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

CpuCalibration calibration() {
  CpuCalibration cal;
  cal.sgemm_flops = 1e11;
  cal.mem_bytes_per_s = 1e10;
  cal.mpi_bytes_per_s = 4e9;
  cal.cache_bytes = 16 << 20;
  cal.cache_bytes_per_s = 4e10;
  cal.threads = 1;
  return cal;
}

TEST(FusedOps, AcceleratorsCostThemAtTheMemoryRoofline) {
  const ChipSpec h100 = find_chip("h100");
  ComputeModel m(h100, ExecutionMode::kEager);
  // 8192 rows of 4096 bf16: x read, w read, y and rstd written; 4 FLOPs per element are far
  // below the vector rate's share of that time.
  const OpDesc norm = rms_norm_op(8192, 4096, 2, false);
  EXPECT_EQ(norm.kind, OpKind::kFused);
  const double bytes = (8192.0 * 4096 + 4096 + 8192.0 * 4096 + 8192) * 2;
  EXPECT_DOUBLE_EQ(static_cast<double>(norm.bytes_read + norm.bytes_written), bytes);
  EXPECT_NEAR(m.roofline_s(norm), bytes / (h100.hbm_bytes_per_s * h100.hbm_efficiency), 1e-12);
  // One kernel with one launch, whatever the mode: it fuses with nothing around it.
  ComputeModel compiled(h100, ExecutionMode::kCompiled);
  const OpDesc add = pointwise_op("aten::add", OpKind::kElementwise, 1 << 20, 1 << 20, 1 << 18);
  EXPECT_EQ(compiled.lower({add, norm, add}).size(), 3u);
  // The linear is the matmul of its shape.
  const OpDesc lin = linear_op(8192, 4096, 1024, 2);
  EXPECT_DOUBLE_EQ(m.roofline_s(lin), m.roofline_s(matmul_op("aten::mm", {1, 8192, 1024, 4096}, 2)));
  const auto back = linear_backward_ops(8192, 4096, 1024, 2, true, true);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_DOUBLE_EQ(back[0].flops + back[1].flops, 2 * lin.flops);
}

TEST(FusedOps, CpuUsesTheMeasuredKernelRateAndDramBeyondTheCache) {
  CpuCalibration cal = calibration();
  cal.kernel_rates["titan::swiglu"] = 2e10;
  cal.kernel_rates["titan::fused_attention"] = 3e10;
  ComputeModel cpu(cpu_chip(cal), ExecutionMode::kEager);
  // 1 MB of traffic in cache: bytes over the measured rate.
  const OpDesc s = swiglu_op(1 << 16, 4, false);
  EXPECT_NEAR(cpu.roofline_s(s), 3.0 * (1 << 16) * 4 / 2e10, 1e-15);
  // 96 MB: the DRAM copy bandwidth is slower than the in-cache rate and sets the time.
  const OpDesc big = swiglu_op(8 << 20, 4, false);
  EXPECT_NEAR(cpu.roofline_s(big), 3.0 * (8 << 20) * 4 / 1e10, 1e-12);
  // No rate measured for the backward: vector math plus its traffic, as any op on this device.
  const OpDesc sb = swiglu_op(1 << 16, 4, true);
  EXPECT_NEAR(cpu.roofline_s(sb), sb.flops / (1e11 / 16) + 5.0 * (1 << 16) * 4 / 4e10, 1e-15);
  // Attention at its measured FLOP rate.
  const OpDesc a = fused_attention_op({2, 8, 4, 128, 128, 16, true, false}, 4);
  EXPECT_NEAR(cpu.roofline_s(a), a.flops / 3e10, 1e-15);
  // What each rests on: the measured rate (not listed as uncertain), or DRAM streaming where
  // the operands spill; an untimed kernel is an estimate like any op.
  EXPECT_EQ(cpu.lower({s})[0].basis, CostBasis::kKernelMeasured);
  EXPECT_EQ(cpu.lower({a})[0].basis, CostBasis::kKernelMeasured);
  EXPECT_EQ(cpu.lower({big})[0].basis, CostBasis::kMemory);
  EXPECT_NE(cpu.lower({sb})[0].basis, CostBasis::kKernelMeasured);
}

TEST(FusedOps, AttentionRateIsInterpolatedOnTheMeasuredShapeGrid) {
  // Measured at head_dim 16 and 64, sequences 128 and 512.
  const std::map<std::string, double> rates = {{"titan::fused_attention@hd=16,s=128", 2e10},
                                               {"titan::fused_attention@hd=64,s=128", 1e11},
                                               {"titan::fused_attention@hd=16,s=512", 6e10},
                                               {"titan::fused_attention@hd=64,s=512", 1.4e11}};
  auto at = [&](int64_t hd, int64_t s) {
    return measured_kernel_rate(rates, fused_attention_op({1, 8, 4, s, s, hd, true, false}, 4));
  };
  EXPECT_DOUBLE_EQ(at(16, 128), 2e10);
  EXPECT_DOUBLE_EQ(at(32, 128), 6e10);   // halfway in log(head_dim)
  EXPECT_DOUBLE_EQ(at(16, 256), 4e10);   // halfway in log(sequence)
  EXPECT_DOUBLE_EQ(at(32, 256), 8e10);   // the centre of the four
  EXPECT_DOUBLE_EQ(at(8, 64), 2e10);     // outside the grid: its edge
  EXPECT_DOUBLE_EQ(at(128, 4096), 1.4e11);
  // No measurement of the backward: no rate (the roofline prices it).
  EXPECT_EQ(measured_kernel_rate(rates, fused_attention_op({1, 8, 4, 256, 256, 32, true, true}, 4)), 0.0);
  EXPECT_TRUE(is_fused_kernel_op("titan::fused_attention_backward@hd=64,s=512"));
  EXPECT_FALSE(is_fused_kernel_op("titan::rms_norm@hd=64,s=512"));
  EXPECT_FALSE(is_fused_kernel_op("titan::fused_attention@hd=64"));
  EXPECT_FALSE(is_fused_kernel_op("titan::fused_attention@hd=x,s=1"));
}

TEST(FusedOps, MeasuredMatmulRateIsAChipFlag) {
  const OpDesc big = matmul_op("aten::mm", {1, 4096, 4096, 4096}, 4);
  ComputeModel cpu(cpu_chip(calibration()), ExecutionMode::kEager);
  EXPECT_TRUE(cpu.chip().matmul_rate_measured);
  EXPECT_EQ(cpu.lower({big})[0].basis, CostBasis::kMatmulMeasured);
  // The same chip under another name is still measured; without the flag it is a datasheet rate.
  ChipSpec renamed = cpu_chip(calibration());
  renamed.name = "my-host";
  EXPECT_EQ(ComputeModel(renamed, ExecutionMode::kEager).lower({big})[0].basis, CostBasis::kMatmulMeasured);
  // Host behaviour follows the flag too: synchronous ops at the measured per-op cost.
  EXPECT_FALSE(execution_overheads(renamed, ExecutionMode::kEager).async);
  EXPECT_DOUBLE_EQ(execution_overheads(renamed, ExecutionMode::kEager).host_per_op_s,
                   execution_overheads(cpu_chip(calibration()), ExecutionMode::kEager).host_per_op_s);
  EXPECT_TRUE(execution_overheads(find_chip("h100"), ExecutionMode::kEager).async);
  renamed.matmul_rate_measured = false;
  EXPECT_EQ(ComputeModel(renamed, ExecutionMode::kEager).lower({big})[0].basis, CostBasis::kMatmulDatasheet);
  EXPECT_FALSE(find_chip("tpu-v7").matmul_rate_measured);
  const CpuCalibration cal = calibration();
  EXPECT_TRUE(find_chip("cpu", &cal).host_fused_kernels);
  EXPECT_FALSE(find_chip("h100").host_fused_kernels);
}

TEST(FusedOps, CalibrationFileReadsKernelRatesAndNamesBadOnes) {
  const std::string head = "sgemm_flops = 1e11\nmem_bytes_per_s = 1e10\nmpi_latency_s = 2e-6\nmpi_bytes_per_s = 5e9\n";
  CpuCalibration cal =
      parse_cpu_calibration(head + "[kernel_rates]\n\"titan::rms_norm\" = 2.5e10\n\"titan::rms_norm_backward\" = 1e10\n", "cal.toml");
  EXPECT_DOUBLE_EQ(cal.kernel_rates.at("titan::rms_norm"), 2.5e10);
  EXPECT_DOUBLE_EQ(cpu_chip(cal).kernel_rates.at("titan::rms_norm_backward"), 1e10);
  try {
    parse_cpu_calibration(head + "[kernel_rates]\n\"titan::layer_norm\" = 1e10\n", "cal.toml");
    ADD_FAILURE() << "an unknown kernel was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cal.toml:6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("titan::layer_norm"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_cpu_calibration(head + "[kernel_rates]\n\"titan::rope\" = -1\n", "cal.toml"), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
