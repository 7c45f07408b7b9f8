#include "util/signal_names.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <utility>

#include "util/ascii_digits.hpp"

namespace shim {
namespace {

constexpr int kMaxSignal = 64;  // the kernel's _NSIG

// Names glibc's sigabbrev_np() does not return because another name owns the number.
constexpr std::pair<std::string_view, int> kSignalAliases[] = {
    {"IOT", SIGABRT}, {"POLL", SIGIO}, {"CLD", SIGCHLD}};

}  // namespace

int parse_signal(std::string_view text) {
  if (text.empty()) throw std::invalid_argument("empty signal name");
  if (all_digits(text)) {
    const auto number = parse_decimal<int>(text);
    if (!number || *number < 1 || *number > kMaxSignal) {
      throw std::invalid_argument(
          fmt::format("signal number {} is not in 1..{}", text, kMaxSignal));
    }
    return *number;
  }

  std::string name(text);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  std::string_view bare = name;
  if (bare.starts_with("SIG")) bare.remove_prefix(3);
  if (!bare.empty()) {
    for (int sig = 1; sig < NSIG; ++sig) {
      const char* abbrev = sigabbrev_np(sig);
      if (abbrev != nullptr && bare == abbrev) return sig;
    }
    for (const auto& [alias, sig] : kSignalAliases) {
      if (bare == alias) return sig;
    }
  }
  throw std::invalid_argument(
      fmt::format("unknown signal {:?} (want e.g. TERM, SIGINT or 15)", text));
}

std::string signal_name(int signal) {
  const char* abbrev = signal > 0 && signal < NSIG ? sigabbrev_np(signal) : nullptr;
  if (abbrev == nullptr) return fmt::format("signal {}", signal);
  return fmt::format("SIG{}", abbrev);
}

}  // namespace shim
