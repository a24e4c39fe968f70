#include "devices/topology.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace titan::devices {
namespace {

std::string join_dims(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

int64_t product(const std::vector<int64_t>& d) {
  int64_t p = 1;
  for (int64_t x : d) p *= x;
  return p;
}

bool is_pow2_upto(int64_t x, int64_t cap) {
  return x >= 1 && x <= cap && (x & (x - 1)) == 0;
}

// Dimensions (innermost first) a single slice / instance of this chip has.
int64_t slice_rank(const ChipSpec& chip) {
  return chip.family == TopologyFamily::kSwitchedDomain ? 1 : chip.torus_dims;
}

// Wraparound rules are chip data (fabric.wraparound and wrap_edge, docs/hardware.md): v4 wraps an
// axis that is a multiple of 4 (OCS closes rings of whole cubes); v5p and v7 only slices made of
// whole 4x4x4 cubes (sub-cube slices own no OCS ports); v5e/v6e only an axis of 16, the pod edge;
// trn1/trn2 only the full edge of 4 (the instance torus, the UltraServer ring of 4 instances).
std::vector<bool> wrap_rule(const ChipSpec& chip, const std::vector<int64_t>& d) {
  std::vector<bool> w(d.size(), false);
  const int64_t e = chip.wrap_edge;
  const bool whole = e > 0 && std::all_of(d.begin(), d.end(), [e](int64_t x) { return x % e == 0; });
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] <= 2) continue;  // a pair has one link; a ring needs 3+ chips
    if (chip.wraparound == "axis-multiple") w[i] = d[i] % e == 0;
    else if (chip.wraparound == "whole-slice") w[i] = whole;
    else if (chip.wraparound == "full-edge") w[i] = d[i] == e;
  }
  return w;
}

// Why a slice shape is not valid for this chip; empty when it is.
std::string slice_problem(const ChipSpec& chip, const std::vector<int64_t>& d) {
  int64_t n = product(d);
  if (static_cast<int64_t>(d.size()) != slice_rank(chip))
    return "a " + chip.name + " slice has " + std::to_string(slice_rank(chip)) + " dimensions";
  for (int64_t x : d)
    if (x < 1) return "dimensions must be positive";
  switch (chip.family) {
    case TopologyFamily::kTpuTorus3D:
      if (n > chip.max_slice_chips)
        return "exceeds the largest " + chip.name + " slice of " +
               std::to_string(chip.max_slice_chips) + " chips";
      if (n < 64) {
        for (int64_t x : d)
          if (x != 1 && x != 2 && x != 4)
            return "a slice smaller than a 4x4x4 cube has dimensions 1, 2 or 4";
      } else {
        for (int64_t x : d)
          if (x % 4 != 0)
            return "slices of 64+ chips are whole 4x4x4 cubes: every dimension must be a "
                   "multiple of 4";
      }
      return "";
    case TopologyFamily::kTpuTorus2D:
      for (int64_t x : d)
        if (!is_pow2_upto(x, 16)) return "dimensions must be 1, 2, 4, 8 or 16 (pod is 16x16)";
      return "";
    case TopologyFamily::kTrainiumTorus:
      if (!is_pow2_upto(d[0], 4) || !is_pow2_upto(d[1], 4))
        return "the NeuronLink instance torus is at most 4x4 with dimensions 1, 2 or 4";
      if (d.size() == 3 && d[2] > 1 && (d[0] != 4 || d[1] != 4))
        return "the UltraServer ring joins whole 4x4 instances";
      if (d.size() == 3 && (d[2] < 1 || d[2] > 4))
        return "an UltraServer ring has at most 4 instances";
      return "";
    case TopologyFamily::kSwitchedDomain:
      if (n > chip.max_slice_chips)
        return "exceeds the largest " + chip.fast_fabric + " domain of " +
               std::to_string(chip.max_slice_chips) + " chips";
      return "";
  }
  return "";
}

// "Most cubic" order: smallest largest dimension, then smallest sum (fewest hops), then
// ascending (the small axis innermost, where TP goes).
bool more_cubic(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  auto key = [](const std::vector<int64_t>& d) {
    int64_t mx = *std::max_element(d.begin(), d.end());
    int64_t sum = 0;
    for (int64_t x : d) sum += x;
    return std::make_tuple(mx, sum, d);
  };
  return key(a) < key(b);
}

// n's divisors in ascending order, found up to sqrt(n) (a study places a mesh on up to tens
// of thousands of chips for every configuration it evaluates).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t f = 1; f * f <= n; ++f) {
    if (n % f) continue;
    low.push_back(f);
    if (f != n / f) high.push_back(n / f);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// Every way to write `remaining` as a product of rank - |cur| factors, in ascending order of
// the first factor, then the next.
void enumerate(int64_t remaining, size_t rank, std::vector<int64_t>& cur,
               std::vector<std::vector<int64_t>>& out) {
  if (cur.size() + 1 == rank) {
    cur.push_back(remaining);
    out.push_back(cur);
    cur.pop_back();
    return;
  }
  for (int64_t f : divisors(remaining)) {
    cur.push_back(f);
    enumerate(remaining / f, rank, cur, out);
    cur.pop_back();
  }
}

std::vector<int64_t> parse_dims(const std::string& text, const std::string& device) {
  std::string s = lower(text);
  if (s.rfind("nvl", 0) == 0) s = s.substr(3);
  std::vector<int64_t> d;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    TITAN_CONFIG_CHECK(digits && part.size() < 10, "topology '", text, "' for ", device,
                       " is not of the form AxBxC (positive integers joined by 'x')");
    d.push_back(std::stoll(part));
    TITAN_CONFIG_CHECK(d.back() > 0, "topology '", text, "' has a zero dimension");
  }
  TITAN_CONFIG_CHECK(!d.empty(), "topology '", text, "' for ", device, " is empty");
  return d;
}

}  // namespace

std::string Topology::describe() const {
  std::ostringstream os;
  os << shape << " (" << num_chips << " chips):";
  for (const PhysicalAxis& a : axes) {
    os << " " << a.name << "=" << a.size;
    if (a.switched) os << "[switch]";
    else os << (a.wraparound ? "[torus]" : "[line]");
  }
  return os.str();
}

std::vector<std::vector<int64_t>> valid_slice_shapes(const ChipSpec& chip, int64_t slice_chips) {
  std::vector<std::vector<int64_t>> all, ok;
  if (slice_chips < 1) return ok;
  std::vector<int64_t> cur;
  enumerate(slice_chips, static_cast<size_t>(slice_rank(chip)), cur, all);
  for (auto& d : all)
    if (slice_problem(chip, d).empty()) ok.push_back(d);
  return ok;
}

Topology make_topology_from_dims(const ChipSpec& chip, const std::vector<int64_t>& slice_dims,
                                 int64_t slices) {
  std::string why = slice_problem(chip, slice_dims);
  TITAN_CONFIG_CHECK(why.empty(), "topology ", join_dims(slice_dims), " is not a valid ",
                     chip.name, " slice: ", why);
  TITAN_CONFIG_CHECK(slices >= 1, "slice count must be positive, got ", slices);
  Topology t;
  t.device = chip.name;
  t.num_chips = product(slice_dims) * slices;
  std::vector<int64_t> shown = slice_dims;
  if (slices > 1) shown.insert(shown.begin(), slices);
  t.shape = join_dims(shown);

  if (chip.family == TopologyFamily::kSwitchedDomain) {
    PhysicalAxis a;
    a.name = lower(chip.fast_fabric);
    a.size = slice_dims[0];
    a.switched = true;
    // One port per chip into the switch: all links together, per direction.
    a.link_bytes_per_s = chip.link_bytes_per_s * static_cast<double>(chip.links);
    a.efficiency = chip.link_efficiency;
    a.hop_latency_s = chip.hop_latency_s;
    if (a.size > 1) t.axes.push_back(a);
  } else {
    static const char* names[] = {"x", "y", "z"};
    std::vector<bool> wrap = wrap_rule(chip, slice_dims);
    for (size_t i = 0; i < slice_dims.size(); ++i) {
      if (slice_dims[i] == 1) continue;
      PhysicalAxis a;
      a.name = names[i];
      a.size = slice_dims[i];
      a.wraparound = wrap[i];
      a.link_bytes_per_s = chip.link_bytes_per_s;  // one link each way to each neighbour
      a.efficiency = chip.link_efficiency;
      a.hop_latency_s = chip.hop_latency_s;
      t.axes.push_back(a);
    }
  }
  if (slices > 1) {
    // Between slices / instances / NVLink domains: every chip has its share of the host NICs
    // into a network we treat as non-blocking (full-bisection fat tree; DCN as a switch).
    PhysicalAxis a;
    a.name = lower(chip.scale_out_fabric);
    a.size = slices;
    a.switched = true;
    a.scale_out = true;
    a.link_bytes_per_s = chip.scale_out_bytes_per_s;
    a.efficiency = chip.scale_out_efficiency;
    a.hop_latency_s = chip.scale_out_latency_s;
    t.axes.push_back(a);
  }
  return t;
}

Topology make_topology(const ChipSpec& chip, int64_t num_chips, const std::string& shape) {
  TITAN_CONFIG_CHECK(num_chips >= 1, "num_chips must be positive, got ", num_chips);
  const int64_t rank = slice_rank(chip);
  if (!shape.empty() && shape != "auto") {
    std::vector<int64_t> d = parse_dims(shape, chip.name);
    int64_t slices = 1;
    if (chip.family == TopologyFamily::kTrainiumTorus && rank == 3 && d.size() == 2)
      d.push_back(1);  // "4x4" on trn2: one instance, no UltraServer ring
    else if (chip.family == TopologyFamily::kTrainiumTorus && rank == 3 && d.size() == 3 &&
             (d[0] != 4 || d[1] != 4) && d[1] == 4 && d[2] == 4) {
      slices = d[0];  // "Nx4x4" on trn2: N instances over EFA
      d = {4, 4, 1};
    }
    if (static_cast<int64_t>(d.size()) == rank + 1) {
      slices = d.front();
      d.erase(d.begin());
    } else if (chip.family == TopologyFamily::kSwitchedDomain && d.size() == 1 &&
               num_chips % d[0] == 0) {
      slices = num_chips / d[0];  // "D" or "nvlD": domain size, domains inferred
    }
    TITAN_CONFIG_CHECK(static_cast<int64_t>(d.size()) == rank, "topology '", shape, "' for ",
                       chip.name, ": expected ", rank, " dimensions for one slice, or ",
                       rank + 1, " with a leading slice count");
    int64_t holds = product(d) * slices;
    TITAN_CONFIG_CHECK(holds == num_chips, "topology '", shape, "' holds ", holds,
                       " chips, which cannot hold num_chips = ", num_chips,
                       (holds < num_chips && num_chips % holds == 0
                            ? " (prefix a slice count over the scale-out network, e.g. '" +
                                  std::to_string(num_chips / holds) + "x" + shape + "')"
                            : std::string()));
    return make_topology_from_dims(chip, d, slices);
  }

  if (chip.family == TopologyFamily::kSwitchedDomain) {
    int64_t domain = std::min(num_chips, chip.fast_domain_chips);
    TITAN_CONFIG_CHECK(num_chips % domain == 0, num_chips, " ", chip.name,
                       " chips do not fill whole ", chip.fast_fabric, " domains of ", domain);
    return make_topology_from_dims(chip, {domain}, num_chips / domain);
  }
  // Fewest slices (most traffic stays on the fast fabric), then the most cubic slice.
  int64_t max_slice = chip.max_slice_chips;
  for (int64_t s = (num_chips + max_slice - 1) / max_slice; s <= num_chips; ++s) {
    if (num_chips % s) continue;
    auto shapes = valid_slice_shapes(chip, num_chips / s);
    if (shapes.empty()) continue;
    auto best = *std::min_element(shapes.begin(), shapes.end(), more_cubic);
    return make_topology_from_dims(chip, best, s);
  }
  TITAN_CONFIG_FAIL(num_chips, " ", chip.name, " chips cannot form ", chip.name,
                    " slices (e.g. TPU slices above 64 chips are whole 4x4x4 cubes)");
}

}  // namespace titan::devices
