#include "devices/chip_catalog.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace titan::devices {
namespace {

// Shared modelling constants (not datasheet figures). One value per fabric class, so that no
// chip gets its own fudge factor.
// Measured H100 NVLink collectives reach ~80% of the datasheet figure (docs/hardware.md: ~370 of
// 450 GB/s). No comparable public measurement exists for ICI / NeuronLink, so the same
// protocol + scheduling loss is assumed for every fast fabric.
constexpr double kFastLinkEfficiency = 0.80;
// NCCL over 400G IB typically reports ~45 of 50 GB/s bus bandwidth; DCN/EFA figures are per-
// chip shares of host NICs, which run at a similar fraction. One value for all scale-out.
constexpr double kScaleOutEfficiency = 0.85;
// docs/hardware.md rule of thumb: about 1 us per hop on ICI; used for NeuronLink and NVLink steps
// too (NVSwitch adds one switch traversal, comparable to an ICI hop).
constexpr double kFastHopLatency = 1e-6;
// Scale-out per-step latency (NIC + switch + transport software). Estimates: IB RDMA with
// NCCL proxies ~5 us; EFA (SRD) and TPU DCN (host NICs, software transport) ~10 us.
constexpr double kIbLatency = 5e-6;
constexpr double kEfaLatency = 10e-6;
constexpr double kDcnLatency = 10e-6;

// Fields every chip of one vendor family shares: fabric names, latencies, efficiencies.
ChipSpec family_base(const char* name, const char* desc, TopologyFamily fam, const char* fast,
                     const char* scale_out, double scale_out_latency) {
  ChipSpec c;
  c.name = name;
  c.description = desc;
  c.family = fam;
  c.fast_fabric = fast;
  c.scale_out_fabric = scale_out;
  c.hop_latency_s = kFastHopLatency;
  c.scale_out_latency_s = scale_out_latency;
  c.link_efficiency = kFastLinkEfficiency;
  c.scale_out_efficiency = kScaleOutEfficiency;
  return c;
}

ChipSpec tpu(const char* name, const char* desc, TopologyFamily fam) {
  return family_base(name, desc, fam, "ICI", "DCN", kDcnLatency);
}

std::vector<ChipSpec> build_catalog() {
  std::vector<ChipSpec> v;

  {  // ---------------------------------------------------------------- TPU v4
    ChipSpec c = tpu("tpu-v4", "Google TPU v4", TopologyFamily::kTpuTorus3D);
    c.peak_bf16_flops = 275e12;      // Cloud TPU v4 docs; scaling book TPU table
    c.hbm_bytes = int64_t{32} << 30;  // 32 GiB, Cloud TPU v4 docs
    c.hbm_bytes_per_s = 1.2e12;       // 1.2 TB/s, Cloud TPU v4 docs / scaling book
    c.link_bytes_per_s = 45e9;        // 45 GB/s per link per direction, scaling book
    c.links = 6;                      // 3D torus: 2 links per axis, scaling book
    c.fast_domain_chips = 4096;       // 4096-chip pod (16x16x16), Cloud TPU v4 docs
    c.max_slice_chips = 4096;         // a slice may span the whole pod
    c.scale_out_bytes_per_s = 6.25e9; // NOT PUBLISHED; assumed as v5p (same 4-chip host, 200G
                                      // NIC per host split over 4 chips)
    c.matmul_tile = 128;              // 128x128 MXU, scaling book
    c.matmul_units = 8;               // 2 TensorCores x 4 MXUs, Cloud TPU v4 docs
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- TPU v5e
    ChipSpec c = tpu("tpu-v5e", "Google TPU v5e", TopologyFamily::kTpuTorus2D);
    c.peak_bf16_flops = 197e12;       // Cloud TPU v5e docs
    c.hbm_bytes = int64_t{16} * 1000 * 1000 * 1000;  // 16 GB, Cloud TPU v5e docs
    c.hbm_bytes_per_s = 0.81e12;      // 819 GB/s rounded to 0.81 TB/s, Cloud TPU v5e docs
    c.link_bytes_per_s = 45e9;        // 45 GB/s per link per direction (400 GB/s bidi per
                                      // chip over 4 links), scaling book / Cloud docs
    c.links = 4;                      // 2D torus, scaling book
    c.fast_domain_chips = 256;        // 16x16 pod, Cloud TPU v5e docs
    c.max_slice_chips = 256;
    c.scale_out_bytes_per_s = 3.125e9;  // 3.1 GB/s per chip DCN, scaling book
    c.matmul_tile = 128;              // 128x128 MXU
    c.matmul_units = 4;               // 1 TensorCore x 4 MXUs, Cloud TPU v5e docs
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- TPU v5p
    ChipSpec c = tpu("tpu-v5p", "Google TPU v5p", TopologyFamily::kTpuTorus3D);
    c.peak_bf16_flops = 459e12;       // Cloud TPU v5p docs
    c.hbm_bytes = int64_t{95} << 30;  // 95 GiB, Cloud TPU v5p docs
    c.hbm_bytes_per_s = 2.77e12;      // 2765 GB/s, Cloud TPU v5p docs
    c.link_bytes_per_s = 90e9;        // ~90 GB/s per link per direction (1.2 TB/s bidi per
                                      // chip over 6 links), Cloud docs / scaling book
    c.links = 6;                      // 3D torus
    c.fast_domain_chips = 8960;       // 8960-chip pod, Cloud TPU v5p docs
    c.max_slice_chips = 6144;         // largest slice 6144 chips, Cloud TPU v5p docs
    c.scale_out_bytes_per_s = 6.25e9; // 6.25 GB/s per chip DCN, scaling book
    c.matmul_tile = 128;              // 128x128 MXU
    c.matmul_units = 8;               // 2 TensorCores x 4 MXUs
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- TPU v6e
    ChipSpec c = tpu("tpu-v6e", "Google TPU v6e (Trillium)", TopologyFamily::kTpuTorus2D);
    c.peak_bf16_flops = 918e12;       // Cloud TPU v6e docs
    c.hbm_bytes = int64_t{32} * 1000 * 1000 * 1000;  // 32 GB, Cloud TPU v6e docs
    c.hbm_bytes_per_s = 1.64e12;      // 1640 GB/s, Cloud TPU v6e docs
    c.link_bytes_per_s = 90e9;        // 90 GB/s per link per direction (800 GB/s bidi per
                                      // chip over 4 links), scaling book / Cloud docs
    c.links = 4;                      // 2D torus
    c.fast_domain_chips = 256;        // 16x16 pod, Cloud TPU v6e docs
    c.max_slice_chips = 256;
    c.scale_out_bytes_per_s = 12.5e9; // 12.5 GB/s per chip DCN, scaling book
    c.matmul_tile = 256;              // 256x256 MXU, Cloud TPU v6e docs
    c.matmul_units = 2;               // 1 TensorCore x 2 MXUs (256x256)
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- TPU v7
    ChipSpec c = tpu("tpu-v7", "Google TPU v7 (Ironwood)", TopologyFamily::kTpuTorus3D);
    c.peak_bf16_flops = 2307e12;      // 2307 TF/s per chip (shows as 2 devices of 1153.5),
                                      // Cloud TPU v7 docs
    c.hbm_bytes = int64_t{192} << 30; // 192 GiB, Cloud TPU v7 docs
    c.hbm_bytes_per_s = 7.37e12;      // 7.37 TB/s, Cloud TPU v7 docs
    c.link_bytes_per_s = 100e9;       // 1.2 TB/s bidi per chip (Cloud docs) over 6 torus
                                      // links = 100 GB/s per link per direction (derived)
    c.links = 6;                      // 3D torus from 4x4x4 cubes + optical switches
    c.fast_domain_chips = 9216;       // 9216-chip pod, Cloud TPU v7 docs
    c.max_slice_chips = 9216;
    c.scale_out_bytes_per_s = 12.5e9; // NOT PUBLISHED (4 chips, 2 NICs per host); assumed
                                      // equal to v6e's 12.5 GB/s per chip
    c.matmul_tile = 256;              // 256x256 MXU (as v6e), Cloud TPU v7 docs
    c.matmul_units = 8;               // 2 TensorCores x 4 MXUs (assumed from the peak:
                                      // 1153.5 TF per core ~ 4 MXUs of 256x256 at ~2 GHz)
    v.push_back(c);
  }

  auto trainium = [](const char* name, const char* desc, TopologyFamily fam) {
    ChipSpec c = family_base(name, desc, fam, "NeuronLink", "EFA", kEfaLatency);
    c.matmul_tile = 128;  // 128x128 systolic tensor engine per NeuronCore, AWS Neuron docs
    return c;
  };
  {  // ---------------------------------------------------------------- Trainium1
    ChipSpec c = trainium("trn1", "AWS Trainium1", TopologyFamily::kTrainiumTorus);
    c.peak_bf16_flops = 190e12;       // AWS Neuron docs, trainium architecture page
    c.hbm_bytes = int64_t{32} << 30;  // 32 GiB, AWS Neuron docs
    c.hbm_bytes_per_s = 0.82e12;      // 820 GB/s, AWS Neuron docs
    c.link_bytes_per_s = 48e9;        // NeuronLink-v2 384 GB/s per chip (AWS docs), read as
                                      // both directions over 4 torus links (assumption)
    c.links = 4;                      // 2D torus of 16 (4x4), AWS docs
    c.fast_domain_chips = 16;         // trn1.32xlarge instance
    c.max_slice_chips = 16;
    c.scale_out_bytes_per_s = 6.25e9; // EFA 800 Gb/s per 16 chips, AWS docs (trn1n: 1600)
    c.matmul_units = 2;               // 2 NeuronCore-v2 per chip
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- Trainium2
    ChipSpec c = trainium("trn2", "AWS Trainium2", TopologyFamily::kTrainiumTorus);
    c.peak_bf16_flops = 667e12;       // AWS Neuron docs, trainium2 architecture page
    c.hbm_bytes = int64_t{96} << 30;  // 96 GiB, AWS Neuron docs
    c.hbm_bytes_per_s = 2.9e12;       // 2.9 TB/s, AWS Neuron docs
    c.link_bytes_per_s = 1.28e12 / 12;  // NeuronLink-v3 1.28 TB/s per chip (AWS docs), read
                                        // as both directions over 6 links: 4 in the 4x4
                                        // instance torus + 2 on the UltraServer ring (assumed)
    c.links = 6;
    c.fast_domain_chips = 64;         // 16 per trn2 instance, 64 per UltraServer, AWS docs
    c.max_slice_chips = 64;
    c.scale_out_bytes_per_s = 25e9;   // EFA 3.2 Tb/s per 16 chips, AWS docs
    c.matmul_units = 8;               // 8 NeuronCore-v3 per chip, AWS docs
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- Trainium3
    ChipSpec c = trainium("trn3", "AWS Trainium3", TopologyFamily::kSwitchedDomain);
    c.peak_bf16_flops = 671e12;       // AWS trainium3 page
    c.hbm_bytes = int64_t{144} << 30; // 144 GiB, AWS trainium3 page
    c.hbm_bytes_per_s = 4.9e12;       // 4.9 TB/s, AWS trainium3 page
    c.link_bytes_per_s = 1024.0 * kGiB;  // switched fabric: AWS pages give 2.56 TB/s and
                                         // 2 TiB/s per chip; the lower (2 TiB/s), read as both
                                         // directions = 1 TiB/s per direction
    c.links = 1;                      // modelled as one switch port of that bandwidth
    c.fast_domain_chips = 64;         // Gen1 UltraServer 64 (Gen2: 144, topology "144")
    c.max_slice_chips = 144;
    c.scale_out_bytes_per_s = 100e9;  // EFA 12.8 Tb/s per server (Gen1), AWS page; 16 chips
                                      // per server assumed
    c.matmul_units = 8;               // 8 NeuronCores per chip (as trn2; assumed)
    v.push_back(c);
  }

  auto gpu = [](const char* name, const char* desc) {
    ChipSpec c = family_base(name, desc, TopologyFamily::kSwitchedDomain, "NVLink", "IB",
                             kIbLatency);
    c.fast_domain_chips = 8;  // HGX 8-GPU NVSwitch board, NVIDIA datasheets
    c.max_slice_chips = 8;
    c.matmul_tile = 128;      // 128x128 CTA output tile of cuBLAS/CUTLASS bf16 kernels
    return c;
  };
  {  // ---------------------------------------------------------------- A100
    ChipSpec c = gpu("a100", "NVIDIA A100 80GB SXM");
    c.peak_bf16_flops = 312e12;       // NVIDIA A100 datasheet
    c.hbm_bytes = int64_t{80} * 1000 * 1000 * 1000;  // 80 GB, datasheet
    c.hbm_bytes_per_s = 2.0e12;       // 2039 GB/s, datasheet
    c.link_bytes_per_s = 25e9;        // NVLink3: 12 links x 25 GB/s = 300 GB/s per direction
    c.links = 12;
    c.scale_out_bytes_per_s = 25e9;   // 200 Gb/s HDR IB per GPU
    c.matmul_units = 108;             // 108 SMs
    c.attention_peak_fraction = 0.70; // FA2 forward up to ~73% of A100 peak (FA2 paper)
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- H100
    ChipSpec c = gpu("h100", "NVIDIA H100 SXM");
    c.peak_bf16_flops = 989e12;       // NVIDIA H100 datasheet (dense)
    c.hbm_bytes = int64_t{80} * 1000 * 1000 * 1000;  // 80 GB, datasheet
    c.hbm_bytes_per_s = 3.35e12;      // 3.35 TB/s, datasheet
    c.link_bytes_per_s = 25e9;        // NVLink4: 18 links x 25 GB/s = 450 GB/s per direction
    c.links = 18;                     // (about 370 achieved, docs/hardware.md)
    c.scale_out_bytes_per_s = 50e9;   // 400 Gb/s NDR IB per GPU, fat tree
    c.matmul_units = 132;             // 132 SMs
    c.attention_peak_fraction = 0.35; // FA2 (PyTorch SDPA) forward ~350 of 989 TFLOP/s,
                                      // FlashAttention-3 paper's FA2 baseline on H100
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- H200
    ChipSpec c = gpu("h200", "NVIDIA H200 SXM");
    c.peak_bf16_flops = 989e12;       // NVIDIA H200 datasheet (dense)
    c.hbm_bytes = int64_t{141} * 1000 * 1000 * 1000;  // 141 GB, datasheet
    c.hbm_bytes_per_s = 4.8e12;       // 4.8 TB/s, datasheet
    c.link_bytes_per_s = 25e9;        // as H100: NVLink4 18 x 25 GB/s per direction
    c.links = 18;
    c.scale_out_bytes_per_s = 50e9;   // 400 Gb/s IB per GPU
    c.matmul_units = 132;             // 132 SMs
    c.attention_peak_fraction = 0.35; // as H100 (same SMs, FA2)
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- H100 96GB 500W
    // The GPU of TorchTitan's published Llama-3.1-8B benchmark (docs/hardware.md calibration
    // table): an H100 SXM power-limited to 500 W with 96 GB HBM2e. Peak is the nominal H100
    // figure (TorchTitan computes MFU against it); sustained clocks under the 500 W cap are
    // not published and not modelled.
    ChipSpec c = gpu("h100-96gb", "NVIDIA H100 96GB HBM2e, 500 W (TorchTitan benchmarks)");
    c.peak_bf16_flops = 989e12;       // nominal H100 dense bf16
    c.hbm_bytes = int64_t{96} * 1000 * 1000 * 1000;  // 96 GB HBM2e, docs/hardware.md
    c.hbm_bytes_per_s = 2.4e12;       // 2.4 TB/s, docs/hardware.md
    c.link_bytes_per_s = 25e9;        // NVLink4 as H100
    c.links = 18;
    c.scale_out_bytes_per_s = 50e9;   // 400 Gb/s IB per GPU (as H100)
    c.matmul_units = 132;
    c.attention_peak_fraction = 0.35; // as H100
    v.push_back(c);
  }
  {  // ---------------------------------------------------------------- B200
    ChipSpec c = gpu("b200", "NVIDIA B200 (HGX 8, or GB200 NVL72 with topology \"nvl72\")");
    c.peak_bf16_flops = 2250e12;      // NVIDIA B200 datasheet (2300 in some sources)
    c.hbm_bytes = int64_t{192} * 1000 * 1000 * 1000;  // 192 GB, datasheet
    c.hbm_bytes_per_s = 8.0e12;       // 8 TB/s, datasheet
    c.link_bytes_per_s = 50e9;        // NVLink5: 18 links x 50 GB/s = 900 GB/s per direction
    c.links = 18;
    c.max_slice_chips = 72;           // GB200 NVL72 rack domain
    c.scale_out_bytes_per_s = 50e9;   // 400 Gb/s per GPU
    c.matmul_units = 148;             // 148 SMs
    c.attention_peak_fraction = 0.35; // FA2 on Blackwell: no published figure; as Hopper
    v.push_back(c);
  }
  return v;
}

const std::vector<ChipSpec>& catalog() {
  static const std::vector<ChipSpec> c = build_catalog();
  return c;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

const std::vector<std::string>& chip_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ChipSpec& c : catalog()) n.push_back(c.name);
    n.push_back("cpu");
    return n;
  }();
  return names;
}

std::string strip_blanks_and_quotes(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\"");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\"");
  return s.substr(b, e - b + 1);
}

ChipSpec find_chip(const std::string& name, const CpuCalibration* cpu) {
  std::string key = lower(strip_blanks_and_quotes(name));
  if (key == "cpu") {
    TITAN_CONFIG_CHECK(cpu != nullptr,
                       "device 'cpu' takes its constants from a calibration file; none was "
                       "given (run the calibration command and pass its output)");
    return cpu_chip(*cpu);
  }
  for (const ChipSpec& c : catalog())
    if (c.name == key) return c;
  std::string valid;
  for (const std::string& n : chip_names()) valid += (valid.empty() ? "" : " ") + n;
  TITAN_CONFIG_FAIL("unknown device '", name, "'; valid devices: ", valid);
}

}  // namespace titan::devices
