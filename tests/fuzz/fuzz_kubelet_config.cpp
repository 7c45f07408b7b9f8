// kubelet_config: arbitrary text as kubelet's configuration and as a static pod's manifest.
// - parse_yaml_subset never crashes, refuses nothing silently (an error has a message), and a tree
//   it reads comes back the same when written out as one line of JSON (every scalar quoted) and
//   read again: the block and the flow readers agree.
// - parse_kubelet_config and parse_static_pod_manifest either fail with a message or give values
//   within their bounds; plan_kubelet_stop of the two then keeps kubelet's invariants: groups
//   sorted by priority, the pod's group the highest not above its priority (or the lowest), SIGTERM
//   no later than the lower groups' grace, a grace no longer than the group's or the pod's, and
//   every time within the sum of the groups.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "kubelet_shutdown.hpp"
#include "yaml_subset.hpp"

namespace {

using shim::yaml_node;

void check(bool ok) {
  if (!ok) std::abort();
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_json(std::string& out, const yaml_node& n) {
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
        append_json_string(out, n.keys[i]);
        out += ": ";
        append_json(out, n.items[i]);
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
        append_json(out, v);
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

  const auto doc = shim::parse_yaml_subset(input);
  if (!doc) {
    check(!doc.error().empty());
  } else {
    std::string json;
    append_json(json, doc.value());
    const auto again = shim::parse_yaml_subset(json);
    // The flow reader counts one level per collection, the block reader one per key or item as
    // well, so only a tree well within the bound must come back.
    if (depth(doc.value()) < shim::kMaxYamlDepth / 2) check(again.ok());
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
