#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shim {

// A value of the flat JSON objects the shim writes (event log records, JSON log lines): a string
// or an integer, nothing nested.
struct flat_json_value {
  bool is_string = false;
  std::string text;  // the decoded string, or the integer's digits
};
// The members in the order written.
using flat_json_object = std::vector<std::pair<std::string, flat_json_value>>;

// One object of string and integer members, nothing before or after it. Strict: a line it accepts
// is valid JSON (raw control characters, bad escapes and trailing bytes are refused); it refuses
// some valid JSON the shim never writes (nesting, floats, true/false/null, \u escapes of UTF-16
// surrogates). nullopt when refused.
std::optional<flat_json_object> parse_flat_json(std::string_view text);

}  // namespace shim
