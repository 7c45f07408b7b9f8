#pragma once
// The shim's strict reader of its own flat JSON objects (src/report/flat_json.hpp), under the names
// the unit and fault tests use: a line it accepts is valid JSON.

#include <optional>
#include <string_view>

#include "report/flat_json.hpp"

namespace shim::test {

using json_value = flat_json_value;
using json_object = flat_json_object;

class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}
  std::optional<json_object> object() const { return parse_flat_json(s_); }

 private:
  std::string_view s_;
};

}  // namespace shim::test
