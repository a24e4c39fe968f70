// Max-min fair rates of flows over shared links, for the timeline (devices/timeline.h), which
// asks at every event: flows as ranges of link ids and the results in buffers the caller
// keeps, so that no event allocates; max_min_fair_rates, the same over vectors.
#pragma once

#include <utility>
#include <vector>

namespace titan::devices {

using Flow = std::pair<const int*, const int*>;  // a flow's links, [first, second)

// Progressive filling: every link carries a total rate of at most 1; a flow with no links
// runs at 1. rate_out[i]: flow i's rate. capacity_buf: scratch (each link once, in link
// order, as a std::map would hold them).
void fair_rates(const std::vector<Flow>& flows, std::vector<double>* rate_out,
                std::vector<std::pair<int, double>>* capacity_buf);
// The same; flows[i] lists flow i's links.
std::vector<double> max_min_fair_rates(const std::vector<std::vector<int>>& flows);

}  // namespace titan::devices
