#include "devices/placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace titan::devices {
namespace {

std::string mesh_string(const std::vector<MeshDim>& mesh) {
  std::string s;
  for (const MeshDim& d : mesh) s += (s.empty() ? "" : " x ") + d.name + "=" + std::to_string(d.degree);
  return s;
}

bool is_ring(const PhysicalAxis& a, const AxisSegment& s) {
  return !a.switched && a.wraparound && s.count * s.stride == a.size && s.count >= 3;
}

// Axes shared by two or more mesh dims: each one splits a ring into lines or strided rings.
int split_axes(const Placement& p) {
  std::map<int, int> users;
  for (const auto& segs : p.segments)
    for (const AxisSegment& s : segs) users[s.axis]++;
  int splits = 0;
  for (const auto& kv : users) splits += kv.second - 1;
  return splits;
}

}  // namespace

Placement place_mesh(const Topology& topology, const std::vector<MeshDim>& mesh) {
  int64_t prod = 1;
  for (const MeshDim& d : mesh) {
    TITAN_CONFIG_CHECK(d.degree >= 1, "mesh dim ", d.name, " has degree ", d.degree,
                       "; degrees must be positive");
    prod *= d.degree;
  }
  TITAN_CONFIG_CHECK(prod == topology.num_chips, "mesh degrees ", mesh_string(mesh), " = ", prod,
                     " do not multiply to num_chips = ", topology.num_chips);
  Placement p;
  p.topology = topology;
  p.mesh = mesh;
  p.segments.resize(mesh.size());

  // Cursor over the axes, innermost first: `used` = chips of the current axis already taken
  // (the stride for the next dim placed on it).
  size_t axis = 0;
  int64_t used = 1;
  for (size_t i = mesh.size(); i-- > 0;) {
    int64_t left = mesh[i].degree;
    while (left > 1) {
      TITAN_CHECK(axis < topology.axes.size(), "placement ran out of axes");
      const PhysicalAxis& a = topology.axes[axis];
      int64_t room = a.size / used;
      int64_t take = std::gcd(left, room);
      TITAN_CONFIG_CHECK(take > 1, "mesh dim ", mesh[i].name, "=", mesh[i].degree,
                         " cannot be laid on topology ", topology.shape, ": axis ", a.name,
                         " has ", room, " chips left, which share no factor with the ", left,
                         " still to place; pick degrees or a topology whose axes they divide");
      AxisSegment s;
      s.axis = static_cast<int>(axis);
      s.count = take;
      s.stride = used;
      s.ring = is_ring(a, s);
      p.segments[i].push_back(s);
      left /= take;
      used *= take;
      if (used == a.size) {
        ++axis;
        used = 1;
      }
    }
  }
  return p;
}

namespace {

// "ep4" -> 4 when name is prefix + digits, else 0.
int64_t sized_name(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string digits = name.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(digits);
}

}  // namespace

// The group's n innermost members (inner = true) or the members at one place in each block of
// n (inner = false): segments in (axis, stride) order are the group's ranks innermost first;
// a segment the boundary falls in splits into an inner and an outer piece.
std::vector<AxisSegment> Placement::split_group(const std::string& base, int64_t n, bool inner,
                                                const std::string& name) const {
  std::vector<AxisSegment> in, out;
  int64_t left = n;
  for (const AxisSegment& s : group(base)) {
    if (left == 1) {
      out.push_back(s);
    } else if (left % s.count == 0) {
      in.push_back(s);
      left /= s.count;
    } else {
      TITAN_CONFIG_CHECK(s.count % left == 0, "process group '", name, "': ", n, " ranks do not split ", base,
                         " on this placement (", describe(), ")");
      AxisSegment a = s, b = s;
      a.count = left;
      b.count = s.count / left;
      b.stride = s.stride * left;
      a.ring = is_ring(topology.axes[a.axis], a);
      b.ring = is_ring(topology.axes[b.axis], b);
      in.push_back(a);
      out.push_back(b);
      left = 1;
    }
  }
  TITAN_CONFIG_CHECK(left == 1, "process group '", name, "': ", n, " ranks exceed ", base, " (", group_size(base), ")");
  return inner ? in : out;
}

std::vector<AxisSegment> Placement::group(const std::string& name) const {
  if (name == "pp_ends") return pipeline_ends();
  if (int64_t n = sized_name(name, "ep")) return split_group("dp_shard_cp", n, true, name);
  if (int64_t m = sized_name(name, "efsdp")) {
    const int64_t all = group_size("dp_shard_cp");
    TITAN_CONFIG_CHECK(all % m == 0, "process group '", name, "': ", m, " does not divide dp_shard x cp (", all, ")");
    return split_group("dp_shard_cp", all / m, false, name);
  }
  std::vector<std::string> dims;
  auto has = [&](const std::string& n) {
    return std::any_of(mesh.begin(), mesh.end(), [&](const MeshDim& d) { return d.name == n; });
  };
  auto add_if = [&](const std::string& n) {
    if (has(n)) dims.push_back(n);
  };
  if (has(name)) {
    dims.push_back(name);
  } else if (name == "dp") {
    add_if("dp_replicate");
    add_if("dp_shard");
  } else if (name == "dp_shard_cp") {
    add_if("dp_shard");
    add_if("cp");
  } else if (name == "dp_cp" || name == "loss") {
    add_if("dp_replicate");
    add_if("dp_shard");
    add_if("cp");
  } else if (name == "world") {
    for (const MeshDim& d : mesh) dims.push_back(d.name);
  } else if (name.find('+') != std::string::npos) {
    std::stringstream ss(name);
    std::string part;
    while (std::getline(ss, part, '+')) dims.push_back(part);
  } else {
    dims.push_back(name);
  }
  std::vector<AxisSegment> out;
  for (const std::string& dn : dims) {
    size_t idx = mesh.size();
    for (size_t i = 0; i < mesh.size(); ++i)
      if (mesh[i].name == dn) idx = i;
    TITAN_CONFIG_CHECK(idx < mesh.size(), "unknown process group '", name, "' (mesh dims: ",
                       mesh_string(mesh), "; flattened: dp dp_shard_cp dp_cp loss world)");
    for (const AxisSegment& s : segments[idx]) out.push_back(s);
  }
  // Merge pieces of one axis that sit next to each other (inner stride*count == outer stride):
  // together they are one longer (possibly ring-closing) group along that axis. Pieces of one
  // axis that are not adjacent (a dim between them left out of the group) stay separate and
  // are costed as if on different axes, which overstates their bandwidth; no flattened group
  // the trainer uses (dp, dp_shard_cp, loss, world) skips a dim.
  std::sort(out.begin(), out.end(), [](const AxisSegment& a, const AxisSegment& b) {
    return std::tie(a.axis, a.stride) < std::tie(b.axis, b.stride);
  });
  std::vector<AxisSegment> merged;
  for (const AxisSegment& s : out) {
    if (!merged.empty() && merged.back().axis == s.axis &&
        merged.back().stride * merged.back().count == s.stride) {
      merged.back().count *= s.count;
      merged.back().ring = is_ring(topology.axes[s.axis], merged.back());
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

// Pipeline rank r sits at digit r_i along pp's segment i (innermost first, mixed radix), so
// ranks 0 and pp - 1 differ on every segment: by (count - 1) x stride chips, or by one stride
// over the wraparound link where pp closes a ring. The pair is costed on the outermost such
// segment (the slowest tier: a scale-out axis when pp reaches one), as a 2-member line that
// far apart; the hops on inner axes are left out (a latency of a few microseconds).
std::vector<AxisSegment> Placement::pipeline_ends() const {
  size_t pp = mesh.size();
  for (size_t i = 0; i < mesh.size(); ++i)
    if (mesh[i].name == "pp") pp = i;
  TITAN_CONFIG_CHECK(pp < mesh.size(), "unknown process group 'pp_ends': no pp dim in the mesh (", mesh_string(mesh),
                     ")");
  std::vector<AxisSegment> out;
  for (const AxisSegment& s : segments[pp]) {
    if (s.count <= 1) continue;
    AxisSegment pair;
    pair.axis = s.axis;
    pair.count = 2;
    pair.stride = s.ring ? s.stride : (s.count - 1) * s.stride;
    out.assign(1, pair);
  }
  return out;
}

int64_t Placement::group_size(const std::string& name) const {
  int64_t n = 1;
  for (const AxisSegment& s : group(name)) n *= s.count;
  return n;
}

std::string Placement::describe() const {
  std::ostringstream os;
  const char* sep = "";
  for (size_t i = mesh.size(); i-- > 0;) {
    if (mesh[i].degree == 1) continue;
    os << sep << mesh[i].name << "=" << mesh[i].degree << " ->";
    sep = "; ";
    for (const AxisSegment& s : segments[i]) {
      const PhysicalAxis& a = topology.axes[s.axis];
      os << " " << a.name << "[" << s.count;
      if (s.stride > 1) os << " stride " << s.stride;
      os << (a.switched ? " switch" : s.ring ? " ring" : " line") << "]";
    }
  }
  return os.str();
}

Placement place_on_device(const ChipSpec& chip, int64_t num_chips, const std::vector<MeshDim>& mesh,
                          const std::string& shape) {
  Topology automatic = make_topology(chip, num_chips, shape);
  if ((!shape.empty() && shape != "auto") || chip.family == TopologyFamily::kSwitchedDomain)
    return place_mesh(automatic, mesh);
  int64_t slices = 1;
  if (!automatic.axes.empty() && automatic.axes.back().scale_out)
    slices = automatic.axes.back().size;
  bool found = false;
  Placement best;
  std::tuple<int, int64_t, int64_t> best_key;
  for (const auto& dims : valid_slice_shapes(chip, num_chips / slices)) {
    Placement p;
    try {
      p = place_mesh(make_topology_from_dims(chip, dims, slices), mesh);
    } catch (const Error&) {
      continue;  // this shape cannot align the degrees; another may
    }
    int64_t mx = *std::max_element(dims.begin(), dims.end());
    int64_t sum = std::accumulate(dims.begin(), dims.end(), int64_t{0});
    auto key = std::make_tuple(split_axes(p), mx, sum);
    if (!found || key < best_key) {
      found = true;
      best = p;
      best_key = key;
    }
  }
  if (!found) return place_mesh(automatic, mesh);  // throws the alignment / product error
  return best;
}

}  // namespace titan::devices
