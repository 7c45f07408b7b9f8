#include "http/http_request_counts.hpp"

namespace shim {

http_request_counts::http_request_counts() {
  for (std::size_t h = 0; h < kHttpHandlerNames.size(); ++h) {
    for (const unsigned code : kCodes) counts_[{static_cast<http_handler>(h), code}] = 0;
  }
}

void http_request_counts::add(http_handler handler, unsigned code) { ++counts_[{handler, code}]; }

std::uint64_t http_request_counts::count(http_handler handler, unsigned code) const {
  const auto it = counts_.find({handler, code});
  return it == counts_.end() ? 0 : it->second;
}

std::uint64_t http_request_counts::count(unsigned code) const {
  std::uint64_t sum = 0;
  for (const auto& [k, n] : counts_) {
    if (k.second == code) sum += n;
  }
  return sum;
}

}  // namespace shim
