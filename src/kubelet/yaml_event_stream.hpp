#pragma once

#include <yaml.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace shim {

// libyaml's event parser over one text, owning its yaml_parser_t and the event last read: each is
// freed by libyaml's own function when it is replaced or goes.
class yaml_event_stream {
 public:
  // text must outlive the stream.
  explicit yaml_event_stream(std::string_view text);
  ~yaml_event_stream();
  yaml_event_stream(const yaml_event_stream&) = delete;
  yaml_event_stream& operator=(const yaml_event_stream&) = delete;

  // Reads the next event into event(); a failure on a syntax error, libyaml's problem in one line:
  // "line 3, column 5: mapping values are not allowed in this context (while parsing a block
  // mapping at line 1)", lines and columns 1-based; a tab where it stopped is named, since it is
  // invisible. After YAML_STREAM_END_EVENT there is nothing more to read.
  result<> next();
  const yaml_event_t& event() const { return event_; }

  // The byte offset in text of a mark's index, which libyaml counts in characters (UTF-8 is all
  // it reads here: a text in UTF-16 has NUL bytes, which parse_yaml refuses first). Cheap for the
  // increasing indexes of events read in order.
  std::size_t byte_offset(std::size_t char_index);

 private:
  std::string problem();

  std::string_view text_;
  yaml_parser_t parser_{};
  yaml_event_t event_{};
  bool has_event_ = false;
  // Where byte_offset() last stopped: that character index is at that byte.
  std::size_t at_char_ = 0;
  std::size_t at_byte_ = 0;
};

}  // namespace shim
