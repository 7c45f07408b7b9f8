#include "kubelet_shutdown.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "config.hpp"
#include "logind_config.hpp"
#include "unique_fd.hpp"
#include "yaml_subset.hpp"

namespace shim {

namespace {

using std::chrono::seconds;

// A field's value that kubelet would refuse, or that is beyond our bounds.
struct field_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A JSON number as kubelet's decoder takes it for an integer field: decimal, optional '-'. A
// quoted value is a string, which kubelet's strict decoding refuses for a number.
std::int64_t integer(const yaml_node& n, std::string_view field, std::int64_t min,
                     std::int64_t max) {
  if (n.type != yaml_node::kind::scalar || n.quoted) {
    throw field_error(fmt::format("{}: must be a number", field));
  }
  std::int64_t v = 0;
  const char* first = n.text.data();
  const char* last = first + n.text.size();
  const auto [end, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range) {
    throw field_error(fmt::format("{}: {} is out of range", field, n.text));
  }
  if (ec != std::errc() || end != last || n.text.empty()) {
    throw field_error(fmt::format("{}: '{}' is not a whole number", field, n.text));
  }
  // YAML 1.1 reads "010" as octal, JSON refuses it: neither is a number to guess at.
  const std::string_view digits = std::string_view(n.text).substr(n.text.front() == '-');
  if (digits.size() > 1 && digits.front() == '0') {
    throw field_error(fmt::format("{}: '{}' has a leading zero", field, n.text));
  }
  if (v < min || v > max) {
    throw field_error(fmt::format("{}: {} is not within [{}, {}]", field, v, min, max));
  }
  return v;
}

// A metav1.Duration: Go's time.ParseDuration syntax, in a string.
std::chrono::nanoseconds duration(const yaml_node& n, std::string_view field) {
  if (n.type != yaml_node::kind::scalar) {
    throw field_error(fmt::format("{}: must be a duration such as \"30s\"", field));
  }
  std::chrono::nanoseconds d{};
  try {
    d = parse_duration(n.text);
  } catch (const std::invalid_argument& e) {
    throw field_error(fmt::format("{}: '{}': {}", field, n.text, e.what()));
  }
  if (d > seconds(kMaxKubeletGraceSeconds)) {
    throw field_error(fmt::format("{}: {} is longer than {}", field, n.text,
                                  format_duration(seconds(kMaxKubeletGraceSeconds))));
  }
  return d;
}

bool is_null(const yaml_node& n) {
  return n.type == yaml_node::kind::scalar && !n.quoted && (n.text.empty() || n.text == "null");
}

std::string plural_s(std::int64_t n) { return n == 1 ? "" : "s"; }

}  // namespace

bool is_kubelet_inhibitor(std::string_view what, std::string_view who, std::string_view why,
                          std::string_view mode, std::uint32_t uid) {
  if (uid != 0 || who != kKubeletInhibitWho || why != kKubeletInhibitWhy || mode != "delay")
    return false;
  while (!what.empty()) {
    const auto colon = what.find(':');
    if (what.substr(0, colon) == "shutdown") return true;
    what = colon == std::string_view::npos ? std::string_view{} : what.substr(colon + 1);
  }
  return false;
}

std::vector<kubelet_priority_group> kubelet_shutdown_config::groups() const {
  std::vector<kubelet_priority_group> g = by_pod_priority;
  if (g.empty()) {
    // migrateConfig(): Go's time.Duration / time.Second truncates to whole seconds.
    if (grace_period.count() == 0) return {};
    const auto normal = grace_period - critical_pods_period;
    if (normal.count() < 0) return {};
    const auto critical = grace_period - normal;
    g = {{0, std::chrono::duration_cast<seconds>(normal).count()},
         {kSystemCriticalPriority, std::chrono::duration_cast<seconds>(critical).count()}};
  }
  // kubelet's sort.Slice is not stable; equal priorities are a configuration kubelet does not
  // order either, and groupByPriority then picks the first of them.
  std::stable_sort(g.begin(), g.end(),
                   [](const auto& a, const auto& b) { return a.priority < b.priority; });
  return g;
}

std::optional<kubelet_stop_plan> plan_kubelet_stop(const kubelet_shutdown_config& config,
                                                   const static_pod_priority& pod) {
  kubelet_stop_plan p;
  p.groups = config.groups();
  if (p.groups.empty()) return std::nullopt;
  p.by_pod_priority = !config.by_pod_priority.empty();
  p.pod_priority = pod.priority.value_or(0);
  // groupByPriority: sort.Search for the first group >= the priority, then one lower unless equal;
  // past the end, the last group.
  const auto it = std::find_if(p.groups.begin(), p.groups.end(),
                               [&](const auto& g) { return g.priority >= p.pod_priority; });
  std::size_t index = static_cast<std::size_t>(it - p.groups.begin());
  if (index == p.groups.size()) {
    index = p.groups.size() - 1;
  } else if (index > 0 && p.groups[index].priority > p.pod_priority) {
    --index;
  }
  p.group_index = index;
  std::int64_t before = 0, total = 0;
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    if (i < index) before += p.groups[i].grace_seconds;
    total += p.groups[i].grace_seconds;
  }
  p.sigterm_latest = seconds(before);
  p.period_requested = seconds(total);
  p.pod_grace = seconds(pod.termination_grace_seconds.value_or(kDefaultTerminationGraceSeconds));
  p.grace = std::min(seconds(p.groups[index].grace_seconds), p.pod_grace);
  return p;
}

namespace {

// "+20s", or "+0s..+20s" when it may come anywhere between the two.
std::string window(seconds from, seconds to) {
  if (from == to) return fmt::format("+{}s", from.count());
  return fmt::format("+{}s..+{}s", from.count(), to.count());
}

}  // namespace

std::string kubelet_stop_plan::sigterm_window() const {
  return window(sigterm_earliest, sigterm_latest);
}

std::string kubelet_stop_plan::sigkill_window() const {
  return window(sigkill_earliest(), sigkill_latest());
}

std::string kubelet_stop_plan::describe() const {
  const auto& g = groups[group_index];
  return fmt::format(
      "kubelet's SIGTERM reaches kube-apiserver at {} and its SIGKILL at {} (pod priority {}, "
      "group {} of {}: priority {}, {} second{}{})",
      sigterm_window(), sigkill_window(), pod_priority, group_index + 1, groups.size(), g.priority,
      g.grace_seconds, plural_s(g.grace_seconds),
      grace.count() < g.grace_seconds ? fmt::format(", cut to the pod's {}s", grace.count()) : "");
}

result<kubelet_shutdown_config> parse_kubelet_config(std::string_view text) {
  using R = result<kubelet_shutdown_config>;
  auto doc = parse_yaml_subset(text);
  if (!doc) return R::failure("kubelet config: " + doc.error());
  const yaml_node& root = doc.value();
  if (root.type != yaml_node::kind::mapping) return R::failure("kubelet config: not a mapping");
  if (const auto* kind = root.find("kind"); kind && kind->text != "KubeletConfiguration") {
    return R::failure(
        fmt::format("kubelet config: kind is '{}', not KubeletConfiguration", kind->text));
  }
  kubelet_shutdown_config c;
  try {
    if (const auto* n = root.find("shutdownGracePeriod"); n && !is_null(*n)) {
      c.grace_period = duration(*n, "shutdownGracePeriod");
    }
    if (const auto* n = root.find("shutdownGracePeriodCriticalPods"); n && !is_null(*n)) {
      c.critical_pods_period = duration(*n, "shutdownGracePeriodCriticalPods");
    }
    if (const auto* n = root.find("shutdownGracePeriodByPodPriority"); n && !is_null(*n)) {
      if (n->type != yaml_node::kind::sequence) {
        throw field_error("shutdownGracePeriodByPodPriority: must be a list");
      }
      if (n->items.size() > kMaxKubeletPriorityGroups) {
        throw field_error(fmt::format("shutdownGracePeriodByPodPriority: {} groups, more than {}",
                                      n->items.size(), kMaxKubeletPriorityGroups));
      }
      for (std::size_t i = 0; i < n->items.size(); ++i) {
        const auto& item = n->items[i];
        const std::string where = fmt::format("shutdownGracePeriodByPodPriority[{}]", i);
        if (item.type != yaml_node::kind::mapping) {
          throw field_error(where + ": must be {priority, shutdownGracePeriodSeconds}");
        }
        kubelet_priority_group g;
        if (const auto* p = item.find("priority")) {
          g.priority = static_cast<std::int32_t>(integer(*p, where + ".priority",
                                                         std::numeric_limits<std::int32_t>::min(),
                                                         std::numeric_limits<std::int32_t>::max()));
        }
        if (const auto* s = item.find("shutdownGracePeriodSeconds")) {
          g.grace_seconds =
              integer(*s, where + ".shutdownGracePeriodSeconds", 0, kMaxKubeletGraceSeconds);
        }
        c.by_pod_priority.push_back(g);
      }
    }
  } catch (const field_error& e) {
    return R::failure(fmt::format("kubelet config: {}", e.what()));
  }
  return R::success(std::move(c));
}

result<static_pod_priority> parse_static_pod_manifest(std::string_view text) {
  using R = result<static_pod_priority>;
  auto doc = parse_yaml_subset(text);
  if (!doc) return R::failure("static pod manifest: " + doc.error());
  const yaml_node& root = doc.value();
  if (root.type != yaml_node::kind::mapping) {
    return R::failure("static pod manifest: not a mapping");
  }
  if (const auto* kind = root.find("kind"); !kind || kind->text != "Pod") {
    return R::failure("static pod manifest: kind is not Pod");
  }
  const auto* spec = root.find("spec");
  if (!spec || spec->type != yaml_node::kind::mapping) {
    return R::failure("static pod manifest: no spec");
  }
  static_pod_priority p;
  try {
    if (const auto* metadata = root.find("metadata");
        metadata && metadata->type == yaml_node::kind::mapping) {
      if (const auto* n = metadata->find("namespace"); n && !is_null(*n)) {
        if (n->type != yaml_node::kind::scalar) {
          throw field_error("metadata.namespace: must be a name");
        }
        p.namespace_name = n->text;
      }
    }
    if (const auto* n = spec->find("priority"); n && !is_null(*n)) {
      p.priority = static_cast<std::int32_t>(integer(*n, "spec.priority",
                                                     std::numeric_limits<std::int32_t>::min(),
                                                     std::numeric_limits<std::int32_t>::max()));
    }
    if (const auto* n = spec->find("priorityClassName"); n && !is_null(*n)) {
      if (n->type != yaml_node::kind::scalar) {
        throw field_error("spec.priorityClassName: must be a name");
      }
      p.priority_class_name = n->text;
    }
    if (const auto* n = spec->find("terminationGracePeriodSeconds"); n && !is_null(*n)) {
      p.termination_grace_seconds =
          integer(*n, "spec.terminationGracePeriodSeconds", 0, kMaxKubeletGraceSeconds);
    }
  } catch (const field_error& e) {
    return R::failure(fmt::format("static pod manifest: {}", e.what()));
  }
  return R::success(std::move(p));
}

result<std::string> read_bounded_file(const std::filesystem::path& path, std::size_t max_bytes) {
  using R = result<std::string>;
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return R::failure(fmt::format("{}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return R::failure(fmt::format("{}: {}", path.string(), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return R::failure(fmt::format("{}: not a regular file", path.string()));
  // Read one byte past the limit, so that a file that grew since fstat is refused too.
  std::string content(max_bytes + 1, '\0');
  std::size_t got = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(fd.get(), content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return R::failure(fmt::format("{}: {}", path.string(), std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) {
    return R::failure(fmt::format("{}: larger than {} bytes: refused", path.string(), max_bytes));
  }
  content.resize(got);
  return R::success(std::move(content));
}

std::optional<std::uint64_t> kubelet_dropin_usec(const std::filesystem::path& conf_dir) {
  const auto file = conf_dir / kKubeletDropinName;
  auto text = read_bounded_file(file);
  if (!text) return std::nullopt;
  std::optional<std::uint64_t> usec;
  for (const auto& s : inhibit_delay_settings(file, text.value())) usec = s.usec;
  return usec;
}

namespace {

// One file through its parser; a failure names the flag and the file.
template <typename T>
result<T> read_kubelet_file(const std::string& path, std::string_view flag,
                            result<T> (*parse)(std::string_view)) {
  if (path.empty()) return result<T>::success({});
  auto text = read_bounded_file(path);
  auto parsed = text ? parse(text.value()) : result<T>::failure(text.error());
  if (parsed) return parsed;
  return result<T>::failure(fmt::format("{}={}: {}", flag, path, parsed.error()));
}

}  // namespace

kubelet_files read_kubelet_files(const std::string& config_path, const std::string& manifest_path,
                                 const std::filesystem::path& logind_conf_dir) {
  return {read_kubelet_file(config_path, "--kubelet-config", parse_kubelet_config),
          read_kubelet_file(manifest_path, "--static-pod-manifest", parse_static_pod_manifest),
          kubelet_dropin_usec(logind_conf_dir)};
}

}  // namespace shim
