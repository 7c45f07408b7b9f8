#include "upstream/upstream_prober.hpp"

#include <array>
#include <cstddef>

namespace shim {
namespace {

constexpr std::array<std::string_view, 9> kFailureNames{
    "none", "timeout", "refused", "connect", "tls", "status", "protocol", "oversize", "config"};
static_assert(kFailureNames.size() == static_cast<std::size_t>(probe_failure::config) + 1,
              "one name per probe_failure, in the same order");

}  // namespace

std::string_view to_string(probe_failure f) { return kFailureNames[static_cast<std::size_t>(f)]; }

std::span<const std::string_view> probe_failure_reasons() {
  return std::span(kFailureNames).subspan(1);
}

}  // namespace shim
