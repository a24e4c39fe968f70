// Exposed communication by kind (see exposed_by_kind.h).
#include "devices/exposed_by_kind.h"

#include <algorithm>

namespace titan::devices {

void ExposedByKind::add(StreamKind kind, const std::string& category, double start_s, double end_s) {
  if (end_s <= start_s || kind == StreamKind::kHost) return;
  int k = -1;
  if (kind == StreamKind::kCommunication) {
    if (last_kind_ < 0 || category != last_category_) {
      const std::string name = category.substr(0, category.find(' '));
      auto [it, added] = kind_of_.try_emplace(name, static_cast<int>(kinds_.size()));
      if (added) kinds_.push_back(name);
      last_category_ = category;
      last_kind_ = it->second;
    }
    k = last_kind_;
  }
  edges_.push_back({start_s, k, +1});
  edges_.push_back({end_s, k, -1});
}

std::vector<CostItem> ExposedByKind::result() {
  // Sweep over the task boundaries: between two of them the set of running tasks is fixed;
  // a stretch with no compute and k collectives gives each of them 1/k of its length.
  std::sort(edges_.begin(), edges_.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  std::vector<int> running(kinds_.size(), 0);
  std::vector<double> exposed(kinds_.size(), 0.0);
  int compute = 0, comm = 0;
  for (size_t i = 0; i < edges_.size();) {
    const double t = edges_[i].t;
    for (; i < edges_.size() && edges_[i].t == t; ++i) {
      if (edges_[i].kind < 0) compute += edges_[i].delta;
      else running[static_cast<size_t>(edges_[i].kind)] += edges_[i].delta, comm += edges_[i].delta;
    }
    if (i == edges_.size() || compute > 0 || comm == 0) continue;
    const double share = (edges_[i].t - t) / comm;
    for (size_t k = 0; k < kinds_.size(); ++k) exposed[k] += share * running[k];
  }
  std::vector<CostItem> out;
  for (size_t k = 0; k < kinds_.size(); ++k)
    if (exposed[k] > 0) out.push_back({kinds_[k], exposed[k]});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace titan::devices
