// Exposed communication by kind (see exposed_comm.h).
#include "trainer/simulate/exposed_comm.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace titan {

std::vector<devices::CostItem> exposed_by_kind(const devices::StepReport& r) {
  // Sweep over the task boundaries: between two of them the set of running tasks is fixed;
  // a stretch with no compute and k collectives gives each of them 1/k of its length.
  struct Edge {
    double t;
    int kind;  // -1: compute; >= 0: index of a collective kind
    int delta;
  };
  std::vector<std::string> kinds;
  std::map<std::string, int> kind_of;
  std::vector<Edge> edges;
  for (const auto& e : r.events) {
    if (e.end_s <= e.start_s || e.kind == devices::StreamKind::kHost) continue;
    int k = -1;
    if (e.kind == devices::StreamKind::kCommunication) {
      const std::string kind = e.category.substr(0, e.category.find(' '));
      auto [it, added] = kind_of.try_emplace(kind, static_cast<int>(kinds.size()));
      if (added) kinds.push_back(kind);
      k = it->second;
    }
    edges.push_back({e.start_s, k, +1});
    edges.push_back({e.end_s, k, -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  std::vector<int> running(kinds.size(), 0);
  std::vector<double> exposed(kinds.size(), 0.0);
  int compute = 0, comm = 0;
  for (size_t i = 0; i < edges.size();) {
    const double t = edges[i].t;
    for (; i < edges.size() && edges[i].t == t; ++i) {
      if (edges[i].kind < 0) compute += edges[i].delta;
      else running[static_cast<size_t>(edges[i].kind)] += edges[i].delta, comm += edges[i].delta;
    }
    if (i == edges.size() || compute > 0 || comm == 0) continue;
    const double share = (edges[i].t - t) / comm;
    for (size_t k = 0; k < kinds.size(); ++k) exposed[k] += share * running[k];
  }
  std::vector<devices::CostItem> out;
  for (size_t k = 0; k < kinds.size(); ++k)
    if (exposed[k] > 0) out.push_back({kinds[k], exposed[k]});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

void add_by_kind(std::vector<devices::CostItem>& sum, const std::vector<devices::CostItem>& add) {
  for (const auto& a : add) {
    auto it = std::find_if(sum.begin(), sum.end(), [&](const auto& s) { return s.category == a.category; });
    if (it == sum.end()) sum.push_back(a);
    else it->seconds += a.seconds;
  }
}

}  // namespace titan
