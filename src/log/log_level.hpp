#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace shim {

// sd-daemon.h's priorities: the journal reads them from a line's "<N>" prefix.
enum class log_level { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

// A level's name in the text format (upper) and in the JSON format (lower).
struct log_level_name {
  std::string_view upper;
  std::string_view lower;
};

// One entry per log_level, from error to debug.
inline constexpr std::array<log_level_name, 5> kLevelNames{{
    {"ERROR", "error"},
    {"WARNING", "warning"},
    {"NOTICE", "notice"},
    {"INFO", "info"},
    {"DEBUG", "debug"},
}};

static_assert(kLevelNames.size() == static_cast<std::size_t>(log_level::debug) -
                                        static_cast<std::size_t>(log_level::error) + 1,
              "one name per log_level, in the same order");

// --log-format: a line of text or one JSON object per line (format_log_line, log_line.hpp).
enum class log_format { text, json };

constexpr const log_level_name& name_of(log_level level) {
  return kLevelNames[static_cast<std::size_t>(level) - static_cast<std::size_t>(log_level::error)];
}

}  // namespace shim
