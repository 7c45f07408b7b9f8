#include "bench_stats.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

double median(const std::vector<double>& v) { return percentile(v, 50); }

std::string ms(double v) { return std::isnan(v) ? "n/a" : fmt::format("{:.2f} ms", v); }

double us_to_ms(std::int64_t us) { return static_cast<double>(us) / 1000.0; }

std::int64_t diff_us(std::uint64_t from, std::uint64_t to) {
  return static_cast<std::int64_t>(to) - static_cast<std::int64_t>(from);
}

void print_distribution_table(const std::vector<distribution_row>& rows) {
  std::cout << "| what | n | min | p50 | p99 | max | target |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : rows) {
    const double p50 = percentile(r.ms_values, 50), p99 = percentile(r.ms_values, 99),
                 mx = percentile(r.ms_values, 100);
    std::string target = r.target.empty() ? "" : r.target;
    if (r.met && !r.ms_values.empty()) target += r.met(p50, p99, mx) ? ": **met**" : ": **missed**";
    std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", r.what, r.ms_values.size(),
                             ms(percentile(r.ms_values, 0)), ms(p50), ms(p99), ms(mx), target);
  }
  std::cout << "\n";
}

}  // namespace bench
