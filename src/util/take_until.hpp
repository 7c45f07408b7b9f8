#pragma once

#include <string_view>

namespace shim {

// What comes before the first separator in rest (all of rest if none); rest keeps what follows
// it. The one splitter of the line-, field- and query-shaped texts the shim reads.
inline std::string_view take_until(std::string_view& rest, char separator) {
  const auto at = rest.find(separator);
  const std::string_view head = rest.substr(0, at);
  rest = at == std::string_view::npos ? std::string_view{} : rest.substr(at + 1);
  return head;
}

}  // namespace shim
