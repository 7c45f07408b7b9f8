#include "apiserver/apiserver_flags.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>

#include "util/duration_text.hpp"

namespace shim {

namespace {

constexpr std::string_view kDelayFlag = "--shutdown-delay-duration";
constexpr std::string_view kRetryAfterFlag = "--shutdown-send-retry-after";
constexpr std::string_view kOpenShiftConfigFlag = "--openshift-config";
// A delay of more than a day is no plan to hold a reboot for: the shim does not plan with it.
constexpr std::chrono::hours kMaxDelay{24};

// Go's strconv.ParseBool, which pflag's bool flags use.
std::optional<bool> parse_go_bool(std::string_view s) {
  static constexpr std::array<std::string_view, 6> kTrue{"1", "t", "T", "TRUE", "true", "True"};
  static constexpr std::array<std::string_view, 6> kFalse{"0", "f", "F", "FALSE", "false", "False"};
  if (std::find(kTrue.begin(), kTrue.end(), s) != kTrue.end()) return true;
  if (std::find(kFalse.begin(), kFalse.end(), s) != kFalse.end()) return false;
  return std::nullopt;
}

// Where kube-apiserver's own arguments start: after "watch-termination ... --" (OpenShift), past
// the words naming the program ("hyperkube kube-apiserver").
std::size_t first_flag(std::span<const std::string> argv) {
  std::size_t i = 0;
  if (!argv.empty() && std::filesystem::path(argv[0]).filename() == "watch-termination") {
    const auto end = std::find(argv.begin(), argv.end(), "--");
    if (end == argv.end()) return argv.size();
    i = static_cast<std::size_t>(end - argv.begin()) + 1;
  }
  while (i < argv.size() && !argv[i].starts_with('-')) ++i;
  return i;
}

}  // namespace

result<apiserver_shutdown> read_apiserver_flags(std::span<const std::string> argv) {
  using R = result<apiserver_shutdown>;
  apiserver_shutdown s;
  bool delay_given = false;
  bool openshift_config = false;
  for (std::size_t i = first_flag(argv); i < argv.size(); ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    const auto eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    const bool inline_value = eq != std::string_view::npos;
    if (name == kOpenShiftConfigFlag) openshift_config = true;
    if (name == kRetryAfterFlag) {
      if (!inline_value) {
        s.send_retry_after = true;
        continue;
      }
      const auto value = parse_go_bool(arg.substr(eq + 1));
      if (!value) {
        return R::failure(fmt::format("{}: {:?} is not a bool, which kube-apiserver refuses",
                                      kRetryAfterFlag, arg.substr(eq + 1)));
      }
      s.send_retry_after = *value;
    } else if (name == kDelayFlag) {
      if (!inline_value && i + 1 == argv.size()) {
        return R::failure(
            fmt::format("{} without a value, which kube-apiserver refuses", kDelayFlag));
      }
      const std::string_view value =
          inline_value ? arg.substr(eq + 1) : std::string_view(argv[++i]);
      try {
        s.delay = parse_duration(value);
      } catch (const duration_error& e) {
        return R::failure(
            fmt::format("{}: {}, which kube-apiserver refuses", kDelayFlag, e.what()));
      }
      if (s.delay > kMaxDelay) {
        return R::failure(fmt::format("{}={} is longer than {}: no plan to hold a reboot for",
                                      kDelayFlag, value, format_duration(kMaxDelay)));
      }
      delay_given = true;
    }
  }
  if (openshift_config && !delay_given) {
    return R::failure(fmt::format(
        "{} is not on the command line: OpenShift keeps it in the file of {}, which the shim does "
        "not read",
        kDelayFlag, kOpenShiftConfigFlag));
  }
  return R::success(s);
}

}  // namespace shim
