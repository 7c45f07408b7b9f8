// upstream_url: arbitrary --upstream-readyz text.
// - parse_upstream_url never crashes, and what it accepts is what the probe can use as it is: a
//   host that is "localhost" or an IP literal (no NUL cutting it short), a port in 1..65535, a
//   target that starts with '/' and has only printable ASCII (it goes into the request line).
// - The scheme decides TLS.
// - text() of an accepted URL parses back to the same URL.
#include <arpa/inet.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "upstream/upstream_settings.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool printable_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7F) {
      return false;
    }
  }
  return true;
}

bool ip_literal(const std::string& host) {
  unsigned char binary[16];
  const int family = host.find(':') == std::string::npos ? AF_INET : AF_INET6;
  return host.find('\0') == std::string::npos && inet_pton(family, host.c_str(), binary) == 1;
}

}  // namespace

extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = shim::parse_upstream_url(input);
  if (!parsed) {
    check(!parsed.error().empty() && parsed.error().find('\n') == std::string::npos);
    return 0;
  }
  const auto& url = parsed.value();
  check(url.host == "localhost" || ip_literal(url.host));
  check(url.port >= 1);
  check(url.target.starts_with('/') && printable_ascii(url.target));
  check(url.target.find('#') == std::string::npos);
  check(url.tls == (input.size() > 5 && std::tolower(static_cast<unsigned char>(input[4])) == 's'));

  const auto again = shim::parse_upstream_url(url.text());
  check(again.ok());
  check(again.value().tls == url.tls && again.value().host == url.host &&
        again.value().port == url.port && again.value().target == url.target);
  check(again.value().text() == url.text());
  return 0;
}
