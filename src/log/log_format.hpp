#pragma once

namespace shim {

// --log-format: a line of text or one JSON object per line (format_log_line, log_line.hpp).
enum class log_format { text, json };

}  // namespace shim
