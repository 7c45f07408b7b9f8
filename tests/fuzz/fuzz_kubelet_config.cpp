// kubelet_config: arbitrary text as kubelet's configuration and as a static pod's manifest.
// - parse_yaml (libyaml underneath) never crashes or leaks, refuses nothing silently (an error has
//   a message), stays within its bounds, and a tree it reads comes back the same when written out
//   as one line of JSON (every scalar quoted) and read again as kubelet reads JSON: check_json_text
//   accepts it and parse_yaml's JSON reading gives the same tree.
// - parse_kubelet_config and parse_static_pod_manifest either fail with a message or give values
//   within their bounds; plan_kubelet_stop of the two then keeps kubelet's invariants: groups
//   sorted by priority, the pod's group the highest not above its priority (or the lowest), SIGTERM
//   no later than the lower groups' grace, a grace no longer than the group's or the pod's, and
//   every time within the sum of the groups.
#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "kubelet/json_text.hpp"
#include "kubelet/kubelet_shutdown.hpp"
#include "kubelet/yaml_document.hpp"

namespace {

using shim::yaml_node;

void check(bool ok) {
  if (!ok) std::abort();
}

// One code point of valid UTF-8 (libyaml gives nothing else) at s[i]; i moves past it.
std::uint32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i++]);
  if (b < 0x80) return b;
  const int more = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  std::uint32_t cp = b & (0x3F >> more);
  for (int k = 0; k < more && i < s.size(); ++k) cp = (cp << 6) | (s[i++] & 0x3F);
  return cp;
}

// A JSON string that libyaml reads back as the same text: what it would not take raw (controls,
// DEL and C1 controls, the byte order mark, U+FFFE/U+FFFF) or would read as a line break (NEL, LS,
// PS) is escaped; astral characters stay raw, since JSON escapes them as surrogates.
void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    const std::uint32_t cp = next_code_point(s, i);
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
               cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out += s.substr(at, i - at);
    }
  }
  out += '"';
}

// longest_key: the longest key as written, in bytes.
void append_json(std::string& out, const yaml_node& n, std::size_t& longest_key) {
  switch (n.type) {
    case yaml_node::kind::scalar:
      append_json_string(out, n.text);
      return;
    case yaml_node::kind::mapping: {
      out += '{';
      bool first = true;
      for (std::size_t i = 0; i < n.keys.size(); ++i) {
        if (!first) out += ", ";
        first = false;
        const std::size_t before = out.size();
        append_json_string(out, n.keys[i]);
        longest_key = std::max(longest_key, out.size() - before);
        out += ": ";
        append_json(out, n.items[i], longest_key);
      }
      out += '}';
      return;
    }
    case yaml_node::kind::sequence: {
      out += '[';
      bool first = true;
      for (const auto& v : n.items) {
        if (!first) out += ", ";
        first = false;
        append_json(out, v, longest_key);
      }
      out += ']';
      return;
    }
  }
}

std::size_t depth(const yaml_node& n) {
  std::size_t d = 0;
  for (const auto& v : n.items) d = std::max(d, depth(v));
  return d + 1;
}

// Same structure and text; quoting aside (the JSON copy quotes every scalar).
bool same(const yaml_node& a, const yaml_node& b) {
  if (a.type != b.type || a.text != b.text || a.keys != b.keys ||
      a.items.size() != b.items.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.items.size(); ++i) {
    if (!same(a.items[i], b.items[i])) return false;
  }
  return true;
}

void check_plan(const shim::kubelet_shutdown_config& c, const shim::static_pod_priority& pod) {
  const auto groups = c.groups();
  for (std::size_t i = 1; i < groups.size(); ++i) {
    check(groups[i - 1].priority <= groups[i].priority);
  }
  const auto plan = shim::plan_kubelet_stop(c, pod);
  if (!plan) {
    check(groups.empty());
    return;
  }
  check(plan->groups == groups);
  check(plan->group_index < groups.size());
  const auto& g = groups[plan->group_index];
  const std::int32_t p = plan->pod_priority;
  check(p == pod.priority.value_or(0));
  // groupByPriority's sort.Search on the sorted groups: an equal priority picks the first group of
  // that priority; otherwise the last group below it; the lowest group when every one is above.
  std::optional<std::size_t> first_equal, last_below;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].priority == p && !first_equal) first_equal = i;
    if (groups[i].priority < p) last_below = i;
  }
  check(plan->group_index == first_equal.value_or(last_below.value_or(0)));
  std::int64_t lower = 0, total = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    check(groups[i].grace_seconds >= 0 && groups[i].grace_seconds <= shim::kMaxKubeletGraceSeconds);
    if (i < plan->group_index) lower += groups[i].grace_seconds;
    total += groups[i].grace_seconds;
  }
  check(plan->sigterm_earliest.count() == 0);
  check(plan->sigterm_latest.count() == lower);
  check(plan->period_requested.count() == total);
  check(plan->grace.count() <= g.grace_seconds);
  check(plan->grace.count() <=
        pod.termination_grace_seconds.value_or(shim::kDefaultTerminationGraceSeconds));
  check(plan->sigkill_latest() <= plan->period_requested);
  check(plan->stops_at_start() == (lower == 0));
  check(!plan->describe().empty());
}

}  // namespace

// UBSan reports (signed overflow, bad shifts) end the run instead of scrolling past.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const auto doc = shim::parse_yaml(input);
  if (!doc) {
    check(!doc.error().empty());
  } else {
    check(depth(doc.value()) <= shim::kMaxYamlDepth + 1);  // + 1: the scalars at the bottom
    std::string json;
    std::size_t longest_key = 0;
    append_json(json, doc.value(), longest_key);
    check(shim::check_json_text(json, shim::kMaxYamlDepth).ok());
    const auto again = shim::parse_yaml(json, shim::yaml_syntax::json);
    // Writing every scalar as a string keeps the number of nodes and the depth within what was
    // read, but not always the size (escapes), nor a key within libyaml's 1024 characters for a
    // simple key (YAML's "? key" has no limit).
    if (json.size() <= shim::kMaxYamlBytes && longest_key < 1000) check(again.ok());
    if (again) check(same(doc.value(), again.value()));
  }

  const auto config = shim::parse_kubelet_config(input);
  if (!config) check(!config.error().empty());
  const auto pod = shim::parse_static_pod_manifest(input);
  if (!pod) check(!pod.error().empty());
  if (config) {
    for (const auto& g : config.value().by_pod_priority) {
      check(g.grace_seconds >= 0 && g.grace_seconds <= shim::kMaxKubeletGraceSeconds);
    }
    check(config.value().by_pod_priority.size() <= shim::kMaxKubeletPriorityGroups);
    check_plan(config.value(), pod ? pod.value() : shim::static_pod_priority{});
  }
  return 0;
}
