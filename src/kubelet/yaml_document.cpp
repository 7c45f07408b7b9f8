#include "kubelet/yaml_document.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "kubelet/yaml_event_stream.hpp"
#include "util/ascii_digits.hpp"

namespace shim {

namespace {

// go-yaml v2's resolveMap: the plain scalars it looks up by their whole text.
constexpr std::array<std::string_view, 5> kNulls = {"", "~", "null", "Null", "NULL"};
constexpr std::array<std::string_view, 22> kBooleans = {
    "y", "Y", "yes", "Yes", "YES", "true",  "True",  "TRUE",  "on",  "On",  "ON",
    "n", "N", "no",  "No",  "NO",  "false", "False", "FALSE", "off", "Off", "OFF"};
constexpr std::array<std::string_view, 12> kNonFinite = {".nan",  ".NaN",  ".NAN",  ".inf",
                                                         ".Inf",  ".INF",  "+.inf", "+.Inf",
                                                         "+.INF", "-.inf", "-.Inf", "-.INF"};
constexpr std::string_view kMergeKey = "<<";

template <std::size_t N>
bool is_one_of(std::string_view s, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

int digit_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 99;
}

enum class go_int { invalid, out_of_range, fits };

// Go's strconv.ParseInt(s, 0, 64) (with_sign) or ParseUint(s, 0, 64): a sign only for ParseInt;
// 0x, 0o, 0b or a leading 0 (octal) choose the base.
go_int parse_go_int(std::string_view s, bool with_sign) {
  bool negative = false;
  if (with_sign && !s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() >= 2 && s.front() == '0') {
    const char prefix = static_cast<char>(s[1] | 0x20);  // lower case
    base = prefix == 'x' ? 16 : prefix == 'b' ? 2 : 8;
    s.remove_prefix(prefix == 'x' || prefix == 'o' || prefix == 'b' ? 2 : 1);
  }
  if (s.empty()) return go_int::invalid;
  const std::uint64_t limit = !with_sign ? UINT64_MAX
                              : negative ? std::uint64_t{1} << 63
                                         : (std::uint64_t{1} << 63) - 1;
  std::uint64_t v = 0;
  bool over = false;
  for (const char c : s) {
    const int d = digit_value(c);
    if (d >= base) return go_int::invalid;
    if (v > (limit - static_cast<std::uint64_t>(d)) / static_cast<std::uint64_t>(base)) over = true;
    if (!over) v = v * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
  }
  return over ? go_int::out_of_range : go_int::fits;
}

// go-yaml's yamlStyleFloat, ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$, whose value is
// finite (strconv.ParseFloat fails on a range error, and the text stays a string).
bool is_yaml_style_float(std::string_view s) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && is_digit(s[i])) ++i;
    return i - from;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  } else {
    if (digits() == 0) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  if (i != s.size()) return false;
  std::string_view number = s;
  if (number.front() == '+') number.remove_prefix(1);  // from_chars takes no '+'
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  return ec == std::errc() && end == number.data() + number.size() && std::isfinite(v);
}

// go-yaml v2's resolve() (sigs.k8s.io/yaml's copy, which reads integers beyond uint64 as big
// integers) for a plain scalar, without its timestamps: a timestamp goes into kubelet's JSON as
// its text, a string.
yaml_type resolve_plain(std::string_view s) {
  if (is_one_of(s, kNulls)) return yaml_type::null;
  if (is_one_of(s, kBooleans)) return yaml_type::boolean;
  if (is_one_of(s, kNonFinite)) return yaml_type::floating;
  const char first = s.front();
  if (first == '.') return is_yaml_style_float(s) ? yaml_type::floating : yaml_type::string;
  if (!is_digit(first) && first != '+' && first != '-') return yaml_type::string;
  std::string plain(s);
  std::erase(plain, '_');
  if (parse_go_int(plain, true) == go_int::fits) return yaml_type::integer;
  const go_int as_unsigned = parse_go_int(plain, false);
  if (as_unsigned == go_int::fits) return yaml_type::integer;
  if (is_yaml_style_float(plain)) return yaml_type::floating;
  if (as_unsigned == go_int::out_of_range) return yaml_type::integer;
  return yaml_type::string;
}

// Thrown inside the builder only; parse_yaml turns it into a result.
struct yaml_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Builds the tree from libyaml's events, refusing as it goes what parse_yaml documents.
class tree_builder {
 public:
  tree_builder(std::string_view text, yaml_syntax syntax) : text_(text), syntax_(syntax) {}

  yaml_node run() {
    yaml_event_stream events(text_);
    for (;;) {
      if (auto read = events.next(); !read) throw yaml_error(read.error());
      const yaml_event_t& e = events.event();
      const std::size_t line = e.start_mark.line + 1;
      switch (e.type) {
        case YAML_STREAM_END_EVENT:
          if (!root_) throw yaml_error("no content");
          return std::move(*root_);
        case YAML_DOCUMENT_START_EVENT:
          if (root_) fail("a second YAML document", line);
          if (e.data.document_start.version_directive ||
              e.data.document_start.tag_directives.start !=
                  e.data.document_start.tag_directives.end) {
            fail("YAML directives are not supported", line);
          }
          break;
        case YAML_ALIAS_EVENT:
          fail("YAML anchors and aliases are not supported", line);
        case YAML_SCALAR_EVENT:
          check_node(e.data.scalar.anchor, e.data.scalar.tag, line);
          add(scalar(events, e, line), line);
          break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
          open(e, line);
          break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: {
          yaml_node done = std::move(open_.back().node);
          open_.pop_back();
          const std::size_t start = done.line;
          add(std::move(done), start);
          break;
        }
        default:  // stream start, document end
          break;
      }
    }
  }

 private:
  // A collection being read.
  struct frame {
    yaml_node node;
    bool flow = false;
    std::optional<std::string> key;        // a mapping's key whose value is next
    std::unordered_set<std::string> seen;  // a mapping's keys: duplicates in linear time
  };

  [[noreturn]] static void fail(std::string_view what, std::size_t line) {
    throw yaml_error(fmt::format("line {}: {}", line, what));
  }

  void check_node(const yaml_char_t* anchor, const yaml_char_t* tag, std::size_t line) {
    if (anchor) fail("YAML anchors and aliases are not supported", line);
    if (tag) fail("YAML tags are not supported", line);
    if (++nodes_ > kMaxYamlNodes) {
      fail(fmt::format("more than {} nodes, the most this reader takes", kMaxYamlNodes), line);
    }
  }

  yaml_node scalar(yaml_event_stream& events, const yaml_event_t& e, std::size_t line) {
    yaml_node n;
    n.line = line;
    n.text.assign(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
    n.quoted = e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    if (syntax_ == yaml_syntax::json) return n;
    const bool in_flow = !open_.empty() && open_.back().flow;
    if (e.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE) {
      const std::size_t from = events.byte_offset(e.start_mark.index);
      const std::size_t to = events.byte_offset(e.end_mark.index);
      if (has_escaped_slash(text_.substr(from, to - from))) {
        fail("a \"\\/\" escape, which go-yaml v2 (kubelet's) does not read", line);
      }
    } else if (!n.quoted && in_flow && n.text.find('?') != std::string::npos) {
      fail(
          "a '?' inside a plain scalar in a flow collection, which go-yaml v2 (kubelet's) ends "
          "there: quote it",
          line);
    }
    return n;
  }

  // The raw text of a double-quoted scalar, quotes included.
  static bool has_escaped_slash(std::string_view raw) {
    for (std::size_t i = 0; i + 1 < raw.size(); ++i) {
      if (raw[i] != '\\') continue;
      if (raw[i + 1] == '/') return true;
      ++i;  // the escaped character, which may be a backslash
    }
    return false;
  }

  // A sequence's or a mapping's start.
  void open(const yaml_event_t& e, std::size_t line) {
    const bool sequence = e.type == YAML_SEQUENCE_START_EVENT;
    const auto& seq = e.data.sequence_start;
    const auto& map = e.data.mapping_start;
    check_node(sequence ? seq.anchor : map.anchor, sequence ? seq.tag : map.tag, line);
    if (open_.size() >= kMaxYamlDepth) fail("nested too deeply", line);
    if (!open_.empty() && open_.back().node.type == yaml_node::kind::mapping && !open_.back().key) {
      fail("a key that is a collection", line);
    }
    frame f;
    f.node.type = sequence ? yaml_node::kind::sequence : yaml_node::kind::mapping;
    f.node.line = line;
    f.flow =
        sequence ? seq.style == YAML_FLOW_SEQUENCE_STYLE : map.style == YAML_FLOW_MAPPING_STYLE;
    open_.push_back(std::move(f));
  }

  // A finished node: the root, an item, a key or a key's value.
  void add(yaml_node n, std::size_t line) {
    if (open_.empty()) {
      root_ = std::move(n);
      return;
    }
    frame& parent = open_.back();
    if (parent.node.type == yaml_node::kind::sequence) {
      parent.node.items.push_back(std::move(n));
    } else if (parent.key) {
      parent.node.keys.push_back(std::move(*parent.key));
      parent.node.items.push_back(std::move(n));
      parent.key.reset();
    } else {
      check_key(n, line);
      if (!parent.seen.insert(n.text).second) fail(fmt::format("duplicate key '{}'", n.text), line);
      parent.key = std::move(n.text);
    }
    if (syntax_ == yaml_syntax::yaml && !parent.key && !parent.node.items.empty()) {
      check_value(parent.node.items.back(), line);
    }
  }

  // sigs.k8s.io/yaml writes a key as a JSON string: it refuses a null one and an integer that
  // does not fit in int64 (go-yaml gives it as uint64 or a big integer).
  void check_key(const yaml_node& k, std::size_t line) const {
    if (k.type != yaml_node::kind::scalar) fail("a key that is a collection", line);
    if (k.quoted || syntax_ == yaml_syntax::json) return;
    if (k.text == kMergeKey) fail("a merge key (<<), which the shim does not follow", line);
    switch (k.resolved()) {
      case yaml_type::null:
        fail("a null key, which kubelet's YAML-to-JSON step refuses", line);
      case yaml_type::integer: {
        std::string plain = k.text;
        std::erase(plain, '_');
        if (parse_go_int(plain, true) != go_int::fits) {
          fail(fmt::format("the key {} is beyond int64, which kubelet's YAML-to-JSON step refuses",
                           k.text),
               line);
        }
        break;
      }
      default:
        break;
    }
  }

  // JSON has no infinity and no NaN: encoding/json refuses them, and kubelet the file.
  static void check_value(const yaml_node& v, std::size_t line) {
    if (v.type == yaml_node::kind::scalar && !v.quoted && is_one_of(v.text, kNonFinite)) {
      fail(fmt::format("'{}' has no JSON form: kubelet refuses the file", v.text), line);
    }
  }

  std::string_view text_;
  yaml_syntax syntax_;
  std::vector<frame> open_;
  std::optional<yaml_node> root_;
  std::size_t nodes_ = 0;
};

}  // namespace

const yaml_node* yaml_node::find(std::string_view key) const {
  if (type != kind::mapping) return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

yaml_type yaml_node::resolved() const {
  if (type != kind::scalar) return yaml_type::null;
  return quoted ? yaml_type::string : resolve_plain(text);
}

result<yaml_node> parse_yaml(std::string_view text, yaml_syntax syntax) {
  if (text.size() > kMaxYamlBytes) {
    return result<yaml_node>::failure(
        fmt::format("{} bytes, more than the {} this reader takes", text.size(), kMaxYamlBytes));
  }
  if (text.find('\0') != std::string_view::npos) {
    return result<yaml_node>::failure("a NUL byte: not a text file");
  }
  try {
    return result<yaml_node>::success(tree_builder(text, syntax).run());
  } catch (const yaml_error& e) {
    return result<yaml_node>::failure(e.what());
  }
}

}  // namespace shim
