// gnuplot plots (see plots.h).
#include "study/plots.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "common/error.h"

namespace titan::study {
namespace {

// The values of the swept keys other than x: one plotted line.
std::string series_label(const Point& p, const std::string& x_key, const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) {
    if (k == x_key) continue;
    const std::string v = key_value(p.cfg, k);
    s += (s.empty() ? "" : " ") + v;
  }
  return s.empty() ? "all" : s;
}

std::string quoted(const std::string& s) {
  std::string q;
  for (char c : s) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return "\"" + q + "\"";
}

void run_gnuplot(const std::string& script) {
  const std::string gp = find_gnuplot();
  TITAN_CHECK(!gp.empty(), "titan-study: gnuplot not found (install gnuplot-nox, or set TITAN_GNUPLOT)");
  const std::string cmd = gp + " " + quoted(script) + " 2>" + quoted(script + ".log");
  TITAN_CHECK(std::system(cmd.c_str()) == 0, "titan-study: gnuplot failed on ", script, " (see ", script, ".log)");
  // A clean run's empty log would only clutter the output folder.
  std::error_code ec;
  if (std::filesystem::file_size(script + ".log", ec) == 0 && !ec) std::filesystem::remove(script + ".log", ec);
}

}  // namespace

std::string find_gnuplot() {
  if (const char* g = std::getenv("TITAN_GNUPLOT")) return g;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (std::filesystem::exists(dir + "/gnuplot")) return dir + "/gnuplot";
  return "";
}

bool is_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  static const unsigned char png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return f.gcount() == 8 && std::equal(sig, sig + 8, reinterpret_cast<const char*>(png));
}

std::string draw_line_plot(const std::string& folder, const std::string& name, const std::string& what,
                           const std::string& title, const std::string& ylabel, const std::string& x_key,
                           const std::vector<std::string>& keys, const std::vector<Point>& points,
                           const std::function<std::optional<double>(const Point&)>& value) {
  if (x_key.empty()) return "";
  std::filesystem::create_directories(folder);
  const std::string base = folder + "/" + name + "_" + what;
  // One data block per series (gnuplot's `index`), x ascending as the sweep lists it.
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  std::vector<std::string> order;
  for (const auto& p : points) {
    if (p.verdict != Verdict::kOk) continue;
    const std::optional<double> y = value(p);
    if (!y) continue;
    const std::string s = series_label(p, x_key, keys);
    if (!series.count(s)) order.push_back(s);
    series[s].emplace_back(std::stod(key_value(p.cfg, x_key)), *y);
  }
  std::ofstream dat(base + ".dat");
  for (const auto& s : order) {
    dat << "# " << s << "\n";
    for (auto& [x, y] : series[s]) dat << x << " " << y << "\n";
    dat << "\n\n";
  }
  dat.close();
  std::ofstream gp(base + ".gp");
  gp << "set terminal pngcairo noenhanced size 960,600 font 'sans,11'\nset output " << quoted(base + ".png") << "\n"
     << "set title " << quoted(name + ": " + title) << "\nset xlabel " << quoted(x_key) << "\nset ylabel "
     << quoted(ylabel) << "\nset grid\nset key outside right\nset yrange [0:*]\n";
  if (x_key == "simulation.num_chips") gp << "set logscale x 2\nset format x '%.0f'\n";
  gp << "plot ";
  for (size_t i = 0; i < order.size(); ++i)
    gp << (i ? ", " : "") << quoted(base + ".dat") << " index " << i << " using 1:2 with linespoints lw 2 title "
       << quoted(order[i]);
  gp << "\n";
  gp.close();
  if (order.empty()) return "";
  run_gnuplot(base + ".gp");
  return base + ".png";
}

std::vector<std::string> draw_plots(const std::string& folder, const std::string& name, const std::string& x_key,
                                    const std::vector<std::string>& keys, const std::vector<Point>& points) {
  std::filesystem::create_directories(folder);
  std::vector<std::string> pngs;
  const std::string base = folder + "/" + name;
  const std::string mfu = draw_line_plot(folder, name, "mfu", "MFU (simulated)", "MFU (%)", x_key, keys, points,
                                         [](const Point& p) { return std::optional<double>(p.result.mfu_percent); });
  if (!mfu.empty()) pngs.push_back(mfu);
  // Stacked shares of the step time, exposed communication by collective kind (the kinds
  // any point exposes, in first-seen order).
  std::vector<std::string> kinds;
  for (const auto& p : points)
    for (const auto& k : p.breakdown.exposed_by_kind)
      if (std::find(kinds.begin(), kinds.end(), k.category) == kinds.end()) kinds.push_back(k.category);
  std::ofstream dat(base + "_breakdown.dat");
  dat << "label compute";
  for (const auto& k : kinds) dat << " " << quoted("exposed " + k);
  dat << " bubble idle\n";
  int rows = 0;
  for (const auto& p : points) {
    if (p.verdict != Verdict::kOk || p.result.report.step_time_s <= 0) continue;
    const double t = p.result.report.step_time_s / 100.0;
    std::string label;
    for (const auto& k : keys) label += (label.empty() ? "" : " ") + key_value(p.cfg, k);
    const auto& b = p.breakdown;
    dat << quoted(label.empty() ? "base" : label) << " " << b.compute_s / t;
    for (const auto& k : kinds) {
      double s = 0;
      for (const auto& e : b.exposed_by_kind)
        if (e.category == k) s = e.seconds;
      dat << " " << s / t;
    }
    dat << " " << b.bubble_s / t << " " << b.idle_s / t << "\n";
    ++rows;
  }
  dat.close();
  std::ofstream gp(base + "_breakdown.gp");
  gp << "set terminal pngcairo noenhanced size " << std::max(960, 40 * rows + 200) << ",640 font 'sans,10'\nset output "
     << quoted(base + "_breakdown.png") << "\nset title " << quoted(name + ": step time breakdown (simulated)")
     << "\nset ylabel 'share of step time (%)'\nset yrange [0:100]\nset style data histograms\n"
     << "set style histogram rowstacked\nset style fill solid 0.85 border -1\nset boxwidth 0.8\n"
     << "set xtics rotate by -60 font 'sans,8'\nset key outside right\n"
     << "plot for [i=2:" << 4 + kinds.size() << "] " << quoted(base + "_breakdown.dat") << " using i:xtic(1) title columnheader(i)\n";
  gp.close();
  if (rows > 0) {
    run_gnuplot(base + "_breakdown.gp");
    pngs.push_back(base + "_breakdown.png");
  }
  return pngs;
}

}  // namespace titan::study
