// kubelet_files_dump config|manifest < FILE: what the shim reads of a kubelet config or a static
// pod's manifest, as one line of JSON for tests/unit/yaml_differential.py to compare with what
// kubelet would read. kubelet_files_dump --batch reads documents as "KIND BYTES\n" and the bytes,
// one after the other, and prints a line for each: one process for thousands of documents, which
// a sanitizer's start-up would otherwise make slow.
//   config:   {"grace_ns":N,"critical_ns":N,"groups":[[PRIORITY,SECONDS],...]}
//   manifest: {"priority":N|null,"priority_class_name":"...","termination_grace_seconds":N|null}
//   either:   {"error":"..."}
#include <fmt/core.h>

#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "kubelet/kubelet_shutdown.hpp"
#include "log/log_line.hpp"

namespace {

template <typename T>
std::string or_null(const std::optional<T>& v) {
  return v ? std::to_string(*v) : "null";
}

std::string dump(std::string_view kind, const std::string& text) {
  if (kind == "config") {
    const auto c = shim::parse_kubelet_config(text);
    if (!c) return fmt::format("{{\"error\":\"{}\"}}", shim::json_escape(c.error()));
    std::string groups;
    for (const auto& g : c.value().by_pod_priority) {
      groups += fmt::format("{}[{},{}]", groups.empty() ? "" : ",", g.priority, g.grace_seconds);
    }
    return fmt::format("{{\"grace_ns\":{},\"critical_ns\":{},\"groups\":[{}]}}",
                       c.value().grace_period.count(), c.value().critical_pods_period.count(),
                       groups);
  }
  const auto p = shim::parse_static_pod_manifest(text);
  if (!p) return fmt::format("{{\"error\":\"{}\"}}", shim::json_escape(p.error()));
  return fmt::format(
      "{{\"priority\":{},\"priority_class_name\":\"{}\",\"termination_grace_seconds\":{}}}",
      or_null(p.value().priority), shim::json_escape(p.value().priority_class_name),
      or_null(p.value().termination_grace_seconds));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view arg = argc == 2 ? argv[1] : "";
  if (arg == "--batch") {
    std::string kind;
    std::size_t size = 0;
    while (std::cin >> kind >> size && std::cin.get() == '\n') {
      std::string text(size, '\0');
      if (!std::cin.read(text.data(), static_cast<std::streamsize>(size))) return 1;
      std::cout << dump(kind, text) << '\n';
    }
    return std::cin.eof() ? 0 : 1;
  }
  if (arg != "config" && arg != "manifest") {
    std::cerr << "usage: kubelet_files_dump config|manifest < FILE, or --batch\n";
    return 2;
  }
  const std::string text(std::istreambuf_iterator<char>(std::cin), {});
  std::cout << dump(arg, text) << '\n';
  return 0;
}
