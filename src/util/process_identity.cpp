#include "util/process_identity.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "util/ascii_digits.hpp"
#include "util/small_file.hpp"

namespace shim {

std::optional<process_identity> identify_process(pid_t pid, const std::string& proc_root) {
  const auto stat = read_small_file(fmt::format("{}/{}/stat", proc_root, pid), kMaxProcFileBytes);
  if (!stat) return std::nullopt;
  // comm is in parentheses and may itself contain ") ": the fields after it follow the last ')'.
  const auto close = stat.value().rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(stat.value()).substr(close + 1);
  // Field 3 (state) is the first after comm; field 22 (starttime) is the 20th.
  std::string_view field;
  for (int i = 0; i < 20; ++i) {
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    const auto end = std::min(rest.find(' '), rest.size());
    field = rest.substr(0, end);
    rest.remove_prefix(end);
    if (i == 0 && (field == "Z" || field == "X")) return std::nullopt;  // exited, not yet reaped
  }
  const auto start_time = parse_decimal<std::uint64_t>(field);
  if (!start_time) return std::nullopt;
  return process_identity{pid, *start_time};
}

}  // namespace shim
