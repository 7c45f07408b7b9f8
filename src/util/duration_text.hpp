#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shim {

enum class duration_problem { syntax, negative, overflow };

// Lets parse_flags word each kind of bad duration for the flag while parse_duration keeps its
// documented std::invalid_argument contract.
class duration_error : public std::invalid_argument {
 public:
  duration_error(duration_problem problem, const std::string& what)
      : std::invalid_argument(what), problem_(problem) {}
  duration_problem problem() const { return problem_; }

 private:
  duration_problem problem_;
};

// Go's time.ParseDuration syntax as Kubernetes users write it: "70s", "1m30s", "250ms", "0".
// Negative durations are refused. Throws duration_error (a std::invalid_argument) with the reason.
std::chrono::nanoseconds parse_duration(std::string_view text);

// Go-style rendering for logs: "1m10s", "250ms", "0s".
std::string format_duration(std::chrono::nanoseconds d);

// The same rendering of unsigned microseconds (logind's unit), for every value up to UINT64_MAX,
// which nanoseconds cannot hold beyond about 292 years.
std::string format_usec(std::uint64_t usec);

}  // namespace shim
