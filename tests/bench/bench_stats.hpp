// Distributions of one run: nearest-rank percentiles, and the markdown table of them.

#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

// Nearest-rank percentile: with n < 100 samples p99 is the largest but one at most.
double percentile(std::vector<double> v, double p);

double median(const std::vector<double>& v);

std::string ms(double v);

double us_to_ms(std::int64_t us);

std::int64_t diff_us(std::uint64_t from, std::uint64_t to);

struct distribution_row {
  std::string what;
  std::vector<double> ms_values;
  std::string target;  // empty: no target
  std::function<bool(double p50, double p99, double max)> met;
};

void print_distribution_table(const std::vector<distribution_row>& rows);

std::vector<double> to_ms(const auto& samples, auto from, auto to) {
  std::vector<double> v;
  for (const auto& s : samples) {
    if (s.*from && s.*to) v.push_back(us_to_ms(diff_us(s.*from, s.*to)));
  }
  return v;
}

inline auto p99_below(double limit) {
  return [limit](double, double p99, double) { return p99 < limit; };
}

}  // namespace bench
