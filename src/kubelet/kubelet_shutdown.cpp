#include "kubelet/kubelet_shutdown.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <stdexcept>

#include "kubelet/json_text.hpp"
#include "kubelet/yaml_document.hpp"
#include "logind/logind_config.hpp"
#include "util/ascii_digits.hpp"
#include "util/duration_text.hpp"
#include "util/small_file.hpp"

namespace shim {

namespace {

using std::chrono::seconds;

// A field's value that kubelet would refuse, or that is beyond our bounds.
struct field_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A plain scalar that YAML 1.1 reads as null ("", "~", "null", "Null", "NULL"): in kubelet's JSON
// it is null, which leaves a field unset (a pointer) or at Go's zero.
bool is_null(const yaml_node& n) {
  return n.type == yaml_node::kind::scalar && n.resolved() == yaml_type::null;
}

// An integer field as kubelet reads it: a YAML integer or a float that JSON writes as one (1e3 is
// 1000), written any way YAML 1.1 has (0x10, 010, +5, 1_000, 30.0). Only plain decimal digits are
// read here; the other forms are refused rather than worked out. A string (a quoted scalar too) is
// refused as kubelet's JSON decoding refuses it.
std::int64_t integer(const yaml_node& n, std::string_view field, std::int64_t min,
                     std::int64_t max) {
  if (n.type != yaml_node::kind::scalar || n.quoted) {
    throw field_error(fmt::format("{}: must be a number", field));
  }
  const std::string_view digits = std::string_view(n.text).substr(n.text.starts_with('-'));
  if (!all_digits(digits)) {
    const auto type = n.resolved();
    throw field_error(
        type == yaml_type::integer || type == yaml_type::floating
            ? fmt::format(
                  "{}: '{}' is not a whole number in decimal digits (refused: YAML 1.1 reads "
                  "it as a number in a way JSON has no form for)",
                  field, n.text)
            : fmt::format("{}: '{}' is not a whole number", field, n.text));
  }
  // YAML 1.1 reads "010" as octal, JSON refuses it: neither is a number to guess at.
  if (digits.size() > 1 && digits.front() == '0') {
    throw field_error(fmt::format("{}: '{}' has a leading zero", field, n.text));
  }
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(n.text.data(), n.text.data() + n.text.size(), v);
  if (ec == std::errc::result_out_of_range) {
    throw field_error(fmt::format("{}: {} is out of range", field, n.text));
  }
  if (v < min || v > max) {
    throw field_error(fmt::format("{}: {} is not within [{}, {}]", field, v, min, max));
  }
  return v;
}

// A string field: YAML's other types are JSON numbers, booleans or null for kubelet's decoding,
// which refuses them for a string (null leaves it empty; the caller skips it).
const std::string& string_field(const yaml_node& n, std::string_view field) {
  if (n.type != yaml_node::kind::scalar)
    throw field_error(fmt::format("{}: must be a name", field));
  if (n.resolved() != yaml_type::string) {
    throw field_error(fmt::format("{}: '{}' is not a string", field, n.text));
  }
  return n.text;
}

// A metav1.Duration: Go's time.ParseDuration syntax, in a string. Its UnmarshalJSON is called for
// null too, and refuses the empty string it then parses.
std::chrono::nanoseconds duration(const yaml_node& n, std::string_view field) {
  if (is_null(n)) {
    throw field_error(fmt::format(
        "{}: null, which kubelet's metav1.Duration refuses (leave the field out for 0)", field));
  }
  if (n.type != yaml_node::kind::scalar) {
    throw field_error(fmt::format("{}: must be a duration such as \"30s\"", field));
  }
  if (n.resolved() != yaml_type::string) {
    throw field_error(fmt::format(
        "{}: '{}' is not a string: kubelet's metav1.Duration takes a string such as \"30s\"", field,
        n.text));
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

// Go's unicode.IsSpace at the start of s: the length of that rune, or 0.
std::size_t unicode_space_at(std::string_view s) {
  static constexpr std::string_view kSpaces[] = {
      "\t",           "\n",          "\v",           "\f",           "\r",           " ",
      "\xc2\x85",     "\xc2\xa0",    "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
      "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const auto sp : kSpaces) {
    if (s.starts_with(sp)) return sp.size();
  }
  // U+2000 to U+200A
  if (s.size() >= 3 && s[0] == '\xe2' && s[1] == '\x80' &&
      static_cast<unsigned char>(s[2]) >= 0x80 && static_cast<unsigned char>(s[2]) <= 0x8a) {
    return 3;
  }
  return 0;
}

// kubelet reads a file whose first character after Unicode spaces is '{' with Go's encoding/json
// (apimachinery's hasJSONPrefix, in yaml.ToJSON for manifests and the JSON serializer's
// RecognizesData for its config), and anything else as YAML.
result<yaml_node> read_document(std::string_view text) {
  std::string_view rest = text;
  while (const std::size_t n = unicode_space_at(rest)) rest.remove_prefix(n);
  if (!rest.starts_with('{')) return parse_yaml(text);
  if (text.size() > kMaxYamlBytes) return parse_yaml(text);  // the same refusal
  if (auto json = check_json_text(text, kMaxYamlDepth); !json) {
    return result<yaml_node>::failure_from(
        json, "not JSON, which kubelet reads a file starting with '{' as: ");
  }
  // JSON's blanks around the value may be tabs, which libyaml takes for indentation outside a flow
  // collection: spaces there read the same.
  std::string copy(text);
  const std::size_t first = copy.find('{');
  const std::size_t last = copy.rfind('}');
  std::replace(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(first), '\t', ' ');
  std::replace(copy.begin() + static_cast<std::ptrdiff_t>(last), copy.end(), '\t', ' ');
  return parse_yaml(copy, yaml_syntax::json);
}

// A file's document, which must be a mapping; a failure starts with what the file is.
result<yaml_node> read_mapping(std::string_view text, std::string_view what) {
  auto doc = read_document(text);
  if (!doc) return result<yaml_node>::failure_from(doc, fmt::format("{}: ", what));
  if (doc.value().type != yaml_node::kind::mapping) {
    return result<yaml_node>::failure(fmt::format("{}: not a mapping", what));
  }
  return doc;
}

// An int32 field (a priority).
std::int32_t int32_field(const yaml_node& n, std::string_view field) {
  return static_cast<std::int32_t>(integer(n, field, std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::max()));
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
  auto doc = read_mapping(text, "kubelet config");
  if (!doc) return R::failure_from(doc);
  const yaml_node& root = doc.value();
  if (const auto* kind = root.find("kind"); kind && kind->text != "KubeletConfiguration") {
    return R::failure(
        fmt::format("kubelet config: kind is '{}', not KubeletConfiguration", kind->text));
  }
  kubelet_shutdown_config c;
  try {
    if (const auto* n = root.find("shutdownGracePeriod")) {
      c.grace_period = duration(*n, "shutdownGracePeriod");
    }
    if (const auto* n = root.find("shutdownGracePeriodCriticalPods")) {
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
        kubelet_priority_group g;
        if (is_null(item)) {  // Go's JSON decoding leaves a null element a zero struct
          c.by_pod_priority.push_back(g);
          continue;
        }
        if (item.type != yaml_node::kind::mapping) {
          throw field_error(where + ": must be {priority, shutdownGracePeriodSeconds}");
        }
        if (const auto* p = item.find("priority"); p && !is_null(*p)) {
          g.priority = int32_field(*p, where + ".priority");
        }
        if (const auto* s = item.find("shutdownGracePeriodSeconds"); s && !is_null(*s)) {
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

bool static_pod_priority::is(std::string_view component_name) const {
  if (!component.empty()) return component == component_name;
  return name == component_name || name.starts_with(std::string(component_name) + "-") ||
         std::find(container_names.begin(), container_names.end(), component_name) !=
             container_names.end();
}

namespace {

// A list of strings: a container's command or args.
std::vector<std::string> string_list(const yaml_node& n, std::string_view field) {
  if (n.type != yaml_node::kind::sequence)
    throw field_error(fmt::format("{}: must be a list", field));
  std::vector<std::string> out;
  for (const auto& item : n.items) out.push_back(string_field(item, field));
  return out;
}

}  // namespace

result<static_pod_priority> parse_static_pod_manifest(std::string_view text) {
  using R = result<static_pod_priority>;
  auto doc = read_mapping(text, "static pod manifest");
  if (!doc) return R::failure_from(doc);
  const yaml_node& root = doc.value();
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
        p.namespace_name = string_field(*n, "metadata.namespace");
      }
      if (const auto* n = metadata->find("name"); n && !is_null(*n)) {
        p.name = string_field(*n, "metadata.name");
      }
      if (const auto* labels = metadata->find("labels")) {
        if (const auto* n = labels->find("component"); n && !is_null(*n)) {
          p.component = string_field(*n, "metadata.labels.component");
        }
      }
    }
    if (const auto* containers = spec->find("containers");
        containers && containers->type == yaml_node::kind::sequence) {
      const yaml_node* chosen = nullptr;
      for (const auto& c : containers->items) {
        const auto* n = c.find("name");
        if (!n || is_null(*n)) continue;
        p.container_names.push_back(string_field(*n, "spec.containers[].name"));
        if (!chosen || (!p.component.empty() && p.container_names.back() == p.component)) {
          chosen = &c;
        }
      }
      if (!chosen && !containers->items.empty()) chosen = &containers->items.front();
      if (chosen) {
        for (const char* field : {"command", "args"}) {
          if (const auto* n = chosen->find(field); n && !is_null(*n)) {
            auto words = string_list(*n, fmt::format("spec.containers[].{}", field));
            p.command.insert(p.command.end(), words.begin(), words.end());
          }
        }
      }
    }
    if (const auto* n = spec->find("priority"); n && !is_null(*n)) {
      p.priority = int32_field(*n, "spec.priority");
    }
    if (const auto* n = spec->find("priorityClassName"); n && !is_null(*n)) {
      p.priority_class_name = string_field(*n, "spec.priorityClassName");
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

result<std::optional<std::uint64_t>> kubelet_dropin_usec(const std::filesystem::path& conf_dir) {
  using R = result<std::optional<std::uint64_t>>;
  const auto file = conf_dir / kKubeletDropinName;
  auto text = read_small_file_if_exists(file, kMaxLogindConfBytes);
  if (!text) return R::failure_from(text);
  std::optional<std::uint64_t> usec;
  if (text.value()) {
    for (const auto& s : inhibit_delay_settings(file, *text.value())) usec = s.usec;
  }
  return R::success(usec);
}

namespace {

// One file through its parser; a failure names the flag and the file.
template <typename T>
result<T> read_kubelet_file(const std::string& path, std::string_view flag,
                            result<T> (*parse)(std::string_view)) {
  if (path.empty()) return result<T>::success({});
  auto text = read_small_file(path, kMaxKubeletFileBytes);
  auto parsed = text ? parse(text.value()) : result<T>::failure_from(text);
  if (parsed) return parsed;
  return result<T>::failure_from(parsed, fmt::format("{}={}: ", flag, path));
}

// Every pod of kubelet's static pod directory: kube-apiserver's, and etcd's if there. A file that
// does not parse is skipped, as kubelet skips it; only kube-apiserver's missing is an error.
std::pair<result<static_pod_priority>, std::optional<static_pod_priority>> read_static_pod_dir(
    const std::filesystem::path& dir) {
  using R = result<static_pod_priority>;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.starts_with('.') || !it->is_regular_file(ec)) continue;
    if (files.size() == kMaxStaticPodFiles) {
      return {R::failure(fmt::format("--static-pod-manifest={}: more than {} files", dir.string(),
                                     kMaxStaticPodFiles)),
              std::nullopt};
    }
    files.push_back(it->path());
  }
  if (ec) {
    return {R::failure(fmt::format("--static-pod-manifest={}: {}", dir.string(), ec.message())),
            std::nullopt};
  }
  std::sort(files.begin(), files.end());
  std::optional<static_pod_priority> apiserver, etcd;
  std::string skipped;
  for (const auto& f : files) {
    auto text = read_small_file(f, kMaxKubeletFileBytes);
    auto pod = text ? parse_static_pod_manifest(text.value()) : R::failure_from(text);
    if (!pod) {
      skipped += fmt::format("; skipped {}: {}", f.filename().string(), pod.error());
      continue;
    }
    if (!apiserver && pod.value().is("kube-apiserver")) {
      apiserver = pod.value();
    } else if (!etcd && pod.value().is("etcd")) {
      etcd = pod.value();
    }
  }
  if (!apiserver) {
    return {R::failure(fmt::format("--static-pod-manifest={}: no kube-apiserver pod among {} "
                                   "files{}",
                                   dir.string(), files.size(), skipped)),
            etcd};
  }
  return {R::success(*apiserver), etcd};
}

}  // namespace

kubelet_files read_kubelet_files(const std::string& config_path, const std::string& manifest_path,
                                 const std::filesystem::path& logind_conf_dir) {
  kubelet_files files{read_kubelet_file(config_path, "--kubelet-config", parse_kubelet_config),
                      result<static_pod_priority>::success({}), std::nullopt,
                      kubelet_dropin_usec(logind_conf_dir)};
  std::error_code ec;
  if (!manifest_path.empty() && std::filesystem::is_directory(manifest_path, ec)) {
    auto [apiserver, etcd] = read_static_pod_dir(manifest_path);
    files.manifest = std::move(apiserver);
    files.etcd = std::move(etcd);
  } else {
    files.manifest =
        read_kubelet_file(manifest_path, "--static-pod-manifest", parse_static_pod_manifest);
  }
  return files;
}

}  // namespace shim
