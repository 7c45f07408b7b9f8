#include "yaml_subset.hpp"

#include <fmt/core.h>

#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "unicode_escape.hpp"

namespace shim {

const yaml_node* yaml_node::find(std::string_view key) const {
  if (type != kind::mapping) return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &items[i];
  }
  return nullptr;
}

namespace {

// Thrown inside the parser only; parse_yaml_subset turns it into a result.
struct yaml_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct line {
  std::size_t number = 0;  // 1-based, for messages
  std::size_t indent = 0;
  std::string_view text;  // after the indentation, without comment or trailing blanks
};

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && (is_blank(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The line without its comment: a '#' at the start or after a blank, outside quotes.
std::string_view strip_comment(std::string_view s) {
  char quote = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote == '"' && c == '\\') {
      ++i;
    } else if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || is_blank(s[i - 1]))) {
      return s.substr(0, i);
    }
  }
  return s;
}

bool is_sequence_item(std::string_view text) { return text == "-" || text.starts_with("- "); }

class parser {
 public:
  explicit parser(std::string_view text) { split_lines(text); }

  yaml_node run() {
    if (lines_.empty()) throw yaml_error("no content");
    yaml_node root;
    const auto& first = lines_.front();
    if (first.text.starts_with('{') || first.text.starts_with('[')) {
      const std::size_t number = first.number;
      ++pos_;
      root = parse_flow(first.text, 0, number);
    } else {
      root = parse_block(first.indent, 0);
    }
    if (pos_ < lines_.size()) fail("unexpected content", lines_[pos_]);
    return root;
  }

 private:
  [[noreturn]] static void fail(std::string_view what, std::size_t number) {
    throw yaml_error(fmt::format("line {}: {}", number, what));
  }
  [[noreturn]] static void fail(std::string_view what, const line& l) { fail(what, l.number); }

  void split_lines(std::string_view text) {
    std::size_t number = 0;
    bool content_seen = false;
    while (!text.empty()) {
      const auto end = text.find('\n');
      std::string_view raw = text.substr(0, end);
      text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
      ++number;
      std::size_t indent = 0;
      while (indent < raw.size() && raw[indent] == ' ') ++indent;
      const std::string_view body = trim(strip_comment(raw.substr(indent)));
      if (body.empty()) continue;
      if (raw[indent] == '\t') fail("a tab in the indentation", number);
      if (indent == 0 && (body == "---" || body.starts_with("--- "))) {
        if (content_seen) fail("a second YAML document", number);
        if (body != "---") fail("content after '---'", number);
        continue;
      }
      if (indent == 0 && body == "...") break;
      if (indent == 0 && body.starts_with('%')) fail("YAML directives are not supported", number);
      content_seen = true;
      lines_.push_back({number, indent, body});
    }
  }

  static void check_depth(std::size_t depth, std::size_t number) {
    if (depth > kMaxYamlDepth) fail("nested too deeply", number);
  }

  yaml_node parse_block(std::size_t indent, std::size_t depth) {
    check_depth(depth, lines_[pos_].number);
    return is_sequence_item(lines_[pos_].text) ? parse_sequence(indent, depth)
                                               : parse_mapping(indent, depth);
  }

  yaml_node parse_mapping(std::size_t indent, std::size_t depth) {
    yaml_node m;
    m.type = yaml_node::kind::mapping;
    std::unordered_set<std::string> seen;  // duplicates found in linear time
    while (pos_ < lines_.size()) {
      const line l = lines_[pos_];
      if (l.indent < indent || (l.indent == indent && is_sequence_item(l.text))) break;
      if (l.indent > indent) fail("unexpected indentation", l);
      auto entry = split_key(l.text, l.number);
      if (!entry) fail("expected 'key: value'", l);
      if (!seen.insert(entry->first).second) {
        fail(fmt::format("duplicate key '{}'", entry->first), l);
      }
      ++pos_;
      m.keys.push_back(std::move(entry->first));
      m.items.push_back(parse_value(entry->second, indent, depth + 1, l.number));
    }
    return m;
  }

  yaml_node parse_sequence(std::size_t indent, std::size_t depth) {
    yaml_node s;
    s.type = yaml_node::kind::sequence;
    while (pos_ < lines_.size()) {
      line& l = lines_[pos_];
      if (l.indent < indent || (l.indent == indent && !is_sequence_item(l.text))) break;
      if (l.indent > indent) fail("unexpected indentation", l);
      const std::string_view content = trim(l.text.substr(1));
      if (content.empty()) {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          s.items.push_back(parse_block(lines_[pos_].indent, depth + 1));
        } else {
          s.items.emplace_back();
        }
      } else if (is_sequence_item(content) || split_key(content, l.number)) {
        // "- key: value" or "- - x": the item's content is a line of its own at its column, and
        // the item's further lines follow at that column.
        l.indent += l.text.size() - content.size();
        l.text = content;
        s.items.push_back(parse_block(l.indent, depth + 1));
      } else {
        ++pos_;
        s.items.push_back(parse_value(content, indent, depth + 1, l.number));
      }
    }
    return s;
  }

  // What follows "key:" (or "- "), given the indentation of the line it is on.
  yaml_node parse_value(std::string_view rest, std::size_t indent, std::size_t depth,
                        std::size_t number) {
    check_depth(depth, number);
    if (rest.empty()) {
      if (pos_ < lines_.size()) {
        const line& next = lines_[pos_];
        if (next.indent > indent) return parse_block(next.indent, depth);
        if (next.indent == indent && is_sequence_item(next.text)) {
          return parse_sequence(indent, depth);
        }
      }
      return {};  // null
    }
    switch (rest.front()) {
      case '&':
      case '*':
        fail("YAML anchors and aliases are not supported", number);
      case '!':
        fail("YAML tags are not supported", number);
      case '|':
      case '>':
        if (is_block_scalar_header(rest)) return block_scalar(indent);
        break;
      case '{':
      case '[':
        return parse_flow(rest, depth, number);
      case '"':
      case '\'': {
        std::size_t at = 0;
        yaml_node n = quoted(rest, at, number);
        if (!trim(rest.substr(at)).empty()) fail("text after a quoted scalar", number);
        return n;
      }
      default:
        break;
    }
    yaml_node n;
    n.text = std::string(rest);
    return n;
  }

  // "|", ">", with a chomping indicator and an indentation digit ("|-", ">+2").
  static bool is_block_scalar_header(std::string_view s) {
    s.remove_prefix(1);
    if (!s.empty() && (s.front() == '+' || s.front() == '-')) s.remove_prefix(1);
    if (!s.empty() && s.front() >= '1' && s.front() <= '9') s.remove_prefix(1);
    return s.empty();
  }

  // A literal or folded block scalar: every following line indented more than its key.
  yaml_node block_scalar(std::size_t indent) {
    yaml_node n;
    n.quoted = true;
    while (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      if (!n.text.empty()) n.text += '\n';
      n.text += lines_[pos_++].text;
    }
    return n;
  }

  // "key: rest", "key:" or "'quoted key': rest"; nullopt for anything else.
  static std::optional<std::pair<std::string, std::string_view>> split_key(std::string_view text,
                                                                           std::size_t number) {
    std::string key;
    std::size_t colon = 0;
    if (text.starts_with('"') || text.starts_with('\'')) {
      std::size_t at = 0;
      key = quoted(text, at, number).text;
      while (at < text.size() && is_blank(text[at])) ++at;
      if (at >= text.size() || text[at] != ':') return std::nullopt;
      colon = at;
    } else if (text.starts_with('{') || text.starts_with('[')) {
      return std::nullopt;
    } else {
      colon = 0;
      while ((colon = text.find(':', colon)) != std::string_view::npos) {
        if (colon + 1 == text.size() || is_blank(text[colon + 1])) break;
        ++colon;
      }
      if (colon == std::string_view::npos) return std::nullopt;
      key = std::string(trim(text.substr(0, colon)));
      if (key.empty()) return std::nullopt;
    }
    if (colon + 1 < text.size() && !is_blank(text[colon + 1])) return std::nullopt;
    return std::make_pair(std::move(key), trim(text.substr(colon + 1)));
  }

  // A quoted scalar starting at text[at]; at ends after the closing quote.
  static yaml_node quoted(std::string_view text, std::size_t& at, std::size_t number) {
    yaml_node n;
    n.quoted = true;
    const char q = text[at++];
    for (;;) {
      if (at >= text.size()) fail("a quoted scalar is not closed on its line", number);
      const char c = text[at++];
      if (c == q) {
        if (q == '\'' && at < text.size() && text[at] == '\'') {
          n.text += '\'';
          ++at;
          continue;
        }
        return n;
      }
      if (q == '"' && c == '\\') {
        if (at >= text.size()) fail("a quoted scalar is not closed on its line", number);
        const char e = text[at++];
        switch (e) {
          case '"':
          case '\\':
          case '/':
            n.text += e;
            break;
          case 'n':
            n.text += '\n';
            break;
          case 't':
            n.text += '\t';
            break;
          case 'r':
            n.text += '\r';
            break;
          case 'b':
            n.text += '\b';
            break;
          case 'f':
            n.text += '\f';
            break;
          case 'u':
            if (!append_unicode_escape(text.substr(at, 4), n.text)) {
              fail("a bad \\u escape (four hex digits, no surrogates)", number);
            }
            at += 4;
            break;
          default:
            fail(fmt::format("unsupported escape '\\{}'", e), number);
        }
        continue;
      }
      n.text += c;
    }
  }

  // A flow collection (JSON-like) starting with first; its following lines are taken until the
  // brackets close.
  yaml_node parse_flow(std::string_view first, std::size_t depth, std::size_t number) {
    std::string text(first);
    bracket_balance balance;
    balance.feed(first);
    while (!balance.closed()) {
      if (pos_ >= lines_.size()) fail("a '{' or '[' is never closed", number);
      text += ' ';
      text += lines_[pos_].text;
      balance.feed(lines_[pos_++].text);
    }
    std::size_t at = 0;
    yaml_node n = flow_value(text, at, depth, number);
    skip_blanks(text, at);
    if (at != text.size()) fail("text after a flow collection", number);
    return n;
  }

  // Whether every bracket opened outside quotes is closed, fed line by line: each line is looked
  // at once, so a flow collection over many lines costs linear time.
  struct bracket_balance {
    long open = 0;
    char quote = 0;

    void feed(std::string_view s) {
      for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (quote == '"' && c == '\\') {
          ++i;
        } else if (quote) {
          if (c == quote) quote = 0;
        } else if (c == '"' || c == '\'') {
          quote = c;
        } else if (c == '{' || c == '[') {
          ++open;
        } else if (c == '}' || c == ']') {
          --open;
        }
      }
    }
    bool closed() const { return open <= 0 && quote == 0; }
  };

  static void skip_blanks(std::string_view s, std::size_t& at) {
    while (at < s.size() && is_blank(s[at])) ++at;
  }

  static yaml_node flow_value(std::string_view s, std::size_t& at, std::size_t depth,
                              std::size_t number) {
    check_depth(depth, number);
    skip_blanks(s, at);
    if (at >= s.size()) fail("a value is missing in a flow collection", number);
    const char c = s[at];
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      yaml_node n;
      n.type = c == '{' ? yaml_node::kind::mapping : yaml_node::kind::sequence;
      std::unordered_set<std::string> seen;
      ++at;
      for (;;) {
        skip_blanks(s, at);
        if (at < s.size() && s[at] == close) {
          ++at;
          return n;
        }
        if (n.type == yaml_node::kind::mapping) {
          std::string key = flow_scalar(s, at, /*key=*/true, number).text;
          skip_blanks(s, at);
          if (at >= s.size() || s[at] != ':') fail("expected ':' in a flow mapping", number);
          ++at;
          if (!seen.insert(key).second) fail(fmt::format("duplicate key '{}'", key), number);
          n.keys.push_back(std::move(key));
          n.items.push_back(flow_value(s, at, depth + 1, number));
        } else {
          n.items.push_back(flow_value(s, at, depth + 1, number));
        }
        skip_blanks(s, at);
        if (at < s.size() && s[at] == ',') {
          ++at;
        } else if (at >= s.size() || s[at] != close) {
          fail(fmt::format("expected ',' or '{}' in a flow collection", close), number);
        }
      }
    }
    return flow_scalar(s, at, /*key=*/false, number);
  }

  static yaml_node flow_scalar(std::string_view s, std::size_t& at, bool key, std::size_t number) {
    skip_blanks(s, at);
    if (at < s.size() && (s[at] == '"' || s[at] == '\'')) return quoted(s, at, number);
    if (at < s.size() && (s[at] == '&' || s[at] == '*' || s[at] == '!')) {
      fail("YAML anchors, aliases and tags are not supported", number);
    }
    const std::size_t start = at;
    while (at < s.size() && s[at] != ',' && s[at] != '}' && s[at] != ']' && s[at] != '{' &&
           s[at] != '[' && !(key && s[at] == ':')) {
      ++at;
    }
    yaml_node n;
    n.text = std::string(trim(s.substr(start, at - start)));
    if (n.text.empty()) fail("an empty value in a flow collection", number);
    return n;
  }

  std::vector<line> lines_;
  std::size_t pos_ = 0;
};

}  // namespace

result<yaml_node> parse_yaml_subset(std::string_view text) {
  if (text.size() > kMaxYamlBytes) {
    return result<yaml_node>::failure(
        fmt::format("{} bytes, more than the {} this reader takes", text.size(), kMaxYamlBytes));
  }
  if (text.find('\0') != std::string_view::npos) {
    return result<yaml_node>::failure("a NUL byte: not a text file");
  }
  try {
    return result<yaml_node>::success(parser(text).run());
  } catch (const yaml_error& e) {
    return result<yaml_node>::failure(e.what());
  }
}

}  // namespace shim
