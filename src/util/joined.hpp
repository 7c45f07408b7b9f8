#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace shim {

// name(item) for each of items, separator between them. std::views::transform would say it, but
// clang 14, which builds the fuzz targets, does not compile libstdc++ 12's views. Not fmt::join:
// each formatter it instantiates costs the binary 1 to 8 KiB (docs/benchmarks.md).
template <typename Items, typename Name = std::identity>
std::string joined(const Items& items, std::string_view separator, Name name = {}) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    out += name(item);
    first = false;
  }
  return out;
}

}  // namespace shim
