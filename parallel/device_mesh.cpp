#include "parallel/device_mesh.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "common/error.h"

namespace titan {

DeviceMesh::DeviceMesh(std::shared_ptr<World> world, std::vector<std::string> dim_names,
                       std::vector<int64_t> shape)
    : world_(std::move(world)), names_(std::move(dim_names)), shape_(std::move(shape)) {
  TITAN_CHECK(world_, "DeviceMesh: no World");
  TITAN_CONFIG_CHECK(names_.size() == shape_.size() && !shape_.empty(), "DeviceMesh: ",
                     names_.size(), " dim names for ", shape_.size(), " sizes");
  std::set<std::string> seen;
  for (size_t d = 0; d < names_.size(); ++d) {
    TITAN_CONFIG_CHECK(!names_[d].empty() && seen.insert(names_[d]).second,
                       "DeviceMesh: dim names must be unique and non-empty, got '", names_[d],
                       "'");
    TITAN_CONFIG_CHECK(shape_[d] >= 1, "DeviceMesh: dim '", names_[d], "' has size ", shape_[d]);
  }
  TITAN_CONFIG_CHECK(size() == world_->size(), "DeviceMesh ", to_string(), ": ", size(),
                     " ranks, but the world size is ", world_->size());
  coord_.assign(shape_.size(), 0);
  int64_t rest = world_->rank();
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    coord_[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  for (const auto& name : names_) {
    groups_[name] = world_->new_group(group_ranks({name}), name);
    group_dims_[name] = {name};
  }
}

int64_t DeviceMesh::size() const {
  int64_t n = 1;
  for (auto s : shape_) n *= s;
  return n;
}

int64_t DeviceMesh::dim_index(const std::string& dim) const {
  auto it = std::find(names_.begin(), names_.end(), dim);
  TITAN_CHECK(it != names_.end(), "DeviceMesh ", to_string(), ": no dim '", dim, "'");
  return it - names_.begin();
}

int64_t DeviceMesh::size(const std::string& name) const { return (*this)[name]->size(); }

int64_t DeviceMesh::coordinate(const std::string& name) const { return (*this)[name]->rank(); }

int DeviceMesh::rank_at(const std::vector<int64_t>& c) const {
  TITAN_CHECK(c.size() == shape_.size(), "DeviceMesh::rank_at: ", c.size(),
              " coordinates for ", shape_.size(), " dims");
  int64_t g = 0;
  for (size_t d = 0; d < shape_.size(); ++d) {
    TITAN_CHECK(c[d] >= 0 && c[d] < shape_[d], "DeviceMesh::rank_at: coordinate ", c[d],
                " outside dim '", names_[d], "' of size ", shape_[d]);
    g = g * shape_[d] + c[d];
  }
  return static_cast<int>(g);
}

std::vector<int> DeviceMesh::group_ranks(const std::vector<std::string>& dims) const {
  std::vector<int64_t> idx;
  for (const auto& name : dims) idx.push_back(dim_index(name));
  std::sort(idx.begin(), idx.end());  // mesh order, whatever order the caller listed
  TITAN_CHECK(std::adjacent_find(idx.begin(), idx.end()) == idx.end(),
              "DeviceMesh: a dim is listed twice");
  // Walk the chosen dims row-major, others fixed at this rank's coordinate.
  std::vector<int> ranks;
  std::vector<int64_t> c = coord_;
  for (auto d : idx) c[d] = 0;
  for (;;) {
    ranks.push_back(rank_at(c));
    int64_t k = static_cast<int64_t>(idx.size()) - 1;
    for (; k >= 0; --k) {
      if (++c[idx[k]] < shape_[idx[k]]) break;
      c[idx[k]] = 0;
    }
    if (k < 0) break;
  }
  return ranks;
}

const std::shared_ptr<Communicator>& DeviceMesh::operator[](const std::string& name) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    std::string known;
    for (const auto& [n, g] : groups_) known += (known.empty() ? "" : ", ") + n;
    TITAN_FAIL("DeviceMesh ", to_string(), ": no dim or group '", name, "' (known: ", known, ")");
  }
  return it->second;
}

const std::shared_ptr<Communicator>& DeviceMesh::flatten(const std::vector<std::string>& dims,
                                                         const std::string& name) {
  TITAN_CHECK(!dims.empty(), "DeviceMesh::flatten '", name, "': no dims");
  TITAN_CHECK(!has(name), "DeviceMesh::flatten: name '", name, "' is taken");
  auto comm = world_->new_group(group_ranks(dims), name);
  group_dims_[name] = dims;
  return groups_[name] = std::move(comm);
}

void DeviceMesh::alias(const std::string& existing, const std::string& name) {
  TITAN_CHECK(!has(name), "DeviceMesh::alias: name '", name, "' is taken");
  groups_[name] = (*this)[existing];
  group_dims_[name] = group_dims_.at(existing);
}

std::string DeviceMesh::to_string() const {
  std::ostringstream os;
  for (size_t d = 0; d < shape_.size(); ++d)
    os << (d ? " x " : "") << (d < names_.size() ? names_[d] : "?") << "=" << shape_[d];
  if (!coord_.empty()) {
    os << ", coordinate [";
    for (size_t d = 0; d < coord_.size(); ++d) os << (d ? ", " : "") << coord_[d];
    os << "]";
  }
  return os.str();
}

}  // namespace titan
