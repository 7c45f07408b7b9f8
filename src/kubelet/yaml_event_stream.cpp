#include "kubelet/yaml_event_stream.hpp"

#include <fmt/core.h>

#include <new>

namespace shim {

namespace {

// libyaml skips a UTF-8 byte order mark before it counts characters.
constexpr std::string_view kUtf8Bom = "\xef\xbb\xbf";

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

yaml_event_stream::yaml_event_stream(std::string_view text) : text_(text) {
  if (!yaml_parser_initialize(&parser_)) throw std::bad_alloc();
  yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  if (text.starts_with(kUtf8Bom)) at_byte_ = kUtf8Bom.size();
}

yaml_event_stream::~yaml_event_stream() {
  if (has_event_) yaml_event_delete(&event_);
  yaml_parser_delete(&parser_);
}

result<> yaml_event_stream::next() {
  if (has_event_) {
    yaml_event_delete(&event_);
    has_event_ = false;
  }
  if (!yaml_parser_parse(&parser_, &event_)) return result<>::failure(problem());
  has_event_ = true;
  return result<>::success();
}

std::string yaml_event_stream::problem() {
  if (parser_.error == YAML_MEMORY_ERROR) return "out of memory";
  const char* problem = parser_.problem ? parser_.problem : "not YAML";
  std::string s = fmt::format("line {}, column {}: {}", parser_.problem_mark.line + 1,
                              parser_.problem_mark.column + 1, problem);
  const std::size_t at = byte_offset(parser_.problem_mark.index);
  if (at < text_.size() && text_[at] == '\t') s += " (a tab)";
  if (parser_.context) {
    s += fmt::format(" ({} at line {})", parser_.context, parser_.context_mark.line + 1);
  }
  return s;
}

std::size_t yaml_event_stream::byte_offset(std::size_t char_index) {
  if (char_index < at_char_) {
    at_char_ = 0;
    at_byte_ = text_.starts_with(kUtf8Bom) ? kUtf8Bom.size() : 0;
  }
  while (at_char_ < char_index && at_byte_ < text_.size()) {
    ++at_byte_;
    while (at_byte_ < text_.size() && is_utf8_continuation(text_[at_byte_])) ++at_byte_;
    ++at_char_;
  }
  return at_byte_;
}

}  // namespace shim
