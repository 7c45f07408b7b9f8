#pragma once

#include <cstddef>
#include <string_view>

#include "util/result.hpp"

namespace shim {

// Whether text is one JSON value (RFC 8259) and nothing else but JSON's blanks around it, nested at
// most max_depth arrays and objects deep: what Go's encoding/json takes, for a file kubelet reads
// as JSON. Also refused, though JSON: a raw NEL, LS or PS inside a string, which libyaml, the
// shim's reader of the tree, would take for a line break where Go keeps the character. The error
// names the line (1-based, counting LF) and what was expected.
result<> check_json_text(std::string_view text, std::size_t max_depth);

}  // namespace shim
