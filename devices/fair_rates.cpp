// Max-min fair rates of flows over shared links (see fair_rates.h).
#include "devices/fair_rates.h"

#include <algorithm>

#include "devices/timeline.h"

namespace titan::devices {

namespace {

bool uses(const Flow& f, int link) { return std::find(f.first, f.second, link) != f.second; }

}  // namespace

void fair_rates(const std::vector<Flow>& flows, std::vector<double>* rate_out,
                std::vector<std::pair<int, double>>* capacity_buf) {
  std::vector<double>& rate = *rate_out;
  rate.assign(flows.size(), -1.0);
  // One flow alone gets every link it uses: 1 / 1 below, or 1 with no links.
  if (flows.size() == 1) {
    rate[0] = 1.0;
    return;
  }
  std::vector<std::pair<int, double>>& capacity = *capacity_buf;
  capacity.clear();
  for (const Flow& f : flows)
    for (const int* l = f.first; l != f.second; ++l) capacity.emplace_back(*l, 1.0);
  std::sort(capacity.begin(), capacity.end());
  capacity.erase(std::unique(capacity.begin(), capacity.end()), capacity.end());
  auto cap_of = [&](int link) -> double& {
    return std::lower_bound(capacity.begin(), capacity.end(), std::make_pair(link, -1.0))->second;
  };
  for (size_t i = 0; i < flows.size(); ++i)
    if (flows[i].first == flows[i].second) rate[i] = 1.0;
  // Progressive filling: the link whose capacity, split over its unfixed flows, is the
  // smallest fixes those flows at that share; repeat with what the other links have left.
  while (true) {
    double best = -1;
    int bottleneck = 0;
    for (const auto& [link, cap] : capacity) {
      int unfixed = 0;
      for (size_t i = 0; i < flows.size(); ++i)
        if (rate[i] < 0 && uses(flows[i], link)) ++unfixed;
      if (unfixed > 0 && (best < 0 || cap / unfixed < best)) {
        best = cap / unfixed;
        bottleneck = link;
      }
    }
    if (best < 0) break;
    for (size_t i = 0; i < flows.size(); ++i) {
      if (rate[i] >= 0 || !uses(flows[i], bottleneck)) continue;
      rate[i] = best;
      for (const int* l = flows[i].first; l != flows[i].second; ++l) {
        double& c = cap_of(*l);
        c = std::max(0.0, c - best);
      }
    }
  }
}

std::vector<double> max_min_fair_rates(const std::vector<std::vector<int>>& flows) {
  std::vector<Flow> f;
  for (const auto& links : flows) f.emplace_back(links.data(), links.data() + links.size());
  std::vector<double> rate;
  std::vector<std::pair<int, double>> capacity;
  fair_rates(f, &rate, &capacity);
  return rate;
}

}  // namespace titan::devices
