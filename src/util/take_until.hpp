#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

namespace shim {

// What comes before the first separator in rest (all of rest if none); rest keeps what follows
// it. With words() below, the splitters of the line-, field- and query-shaped texts the shim reads.
inline std::string_view take_until(std::string_view& rest, char separator) {
  const auto at = rest.find(separator);
  const std::string_view head = rest.substr(0, at);
  rest = at == std::string_view::npos ? std::string_view{} : rest.substr(at + 1);
  return head;
}

// The blank-separated fields of text (runs of blanks count as one), as views into it.
inline std::vector<std::string_view> words(std::string_view text) {
  constexpr std::string_view kBlank = " \t\n";
  std::vector<std::string_view> out;
  for (auto at = text.find_first_not_of(kBlank); at != std::string_view::npos;
       at = text.find_first_not_of(kBlank, at)) {
    const auto end = std::min(text.find_first_of(kBlank, at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end;
  }
  return out;
}

}  // namespace shim
