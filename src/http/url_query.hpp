#pragma once

#include <optional>
#include <string_view>

#include "util/take_until.hpp"

namespace shim {

// A request target's path and query, as /readyz and the control socket read them: "a=1&b&c=2"
// gives its items in order; nothing is decoded (no value either takes needs it).
struct query_item {
  std::string_view key;
  std::string_view value;  // empty for "b" and for "b="
};

inline std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

inline std::string_view query_of(std::string_view target) {
  const auto q = target.find('?');
  return q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
}

// The next item of `query`, which it consumes; nullopt at its end.
inline std::optional<query_item> next_query_item(std::string_view& query) {
  if (query.empty()) return std::nullopt;
  std::string_view value = take_until(query, '&');
  const std::string_view key = take_until(value, '=');
  return query_item{key, value};
}

}  // namespace shim
