#include "upstream/upstream_settings.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <strings.h>

#include "util/ascii_digits.hpp"

namespace shim {

namespace {

constexpr std::string_view kDefaultPath = "/readyz";

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() &&
         ::strncasecmp(text.data(), prefix.data(), prefix.size()) == 0;
}

bool is_ip_literal(const std::string& host, bool v6) {
  unsigned char binary[16];
  return inet_pton(v6 ? AF_INET6 : AF_INET, host.c_str(), binary) == 1;
}

}  // namespace

std::string upstream_url::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}://{}{}{}:{}{}", tls ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "",
                     port, target);
}

result<upstream_url> parse_upstream_url(std::string_view text) {
  using parsed = result<upstream_url>;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    // Checked on the whole text first: a NUL in the host would otherwise end it for inet_pton
    // ("127.0.0.1\0junk" accepted), and the host goes into the Host header.
    if (byte <= 0x20 || byte >= 0x7F) {
      return parsed::failure("a space, control or non-ASCII byte in the URL (percent-encode it)");
    }
  }
  upstream_url url;
  std::string_view rest = text;
  if (starts_with_ignoring_case(rest, "https://")) {
    url.tls = true;
    rest.remove_prefix(8);
  } else if (starts_with_ignoring_case(rest, "http://")) {
    rest.remove_prefix(7);
  } else {
    return parsed::failure("want an http:// or https:// URL, e.g. https://localhost:6443/readyz");
  }
  const auto path = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, path);
  const std::string_view target = path == std::string_view::npos ? "" : rest.substr(path);
  if (target.find('#') != std::string_view::npos) return parsed::failure("a fragment is not sent");
  url.target = target.starts_with('/') ? "" : std::string(kDefaultPath);
  url.target += target;
  if (authority.find('@') != std::string_view::npos) {
    return parsed::failure("no user info in the URL; use --upstream-token-file");
  }
  std::string_view port;
  bool v6 = false;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return parsed::failure("unclosed [ in the host");
    url.host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) return parsed::failure("junk after ]");
    if (!after.empty()) port = after.substr(1);
    v6 = true;
  } else {
    const auto colon = authority.rfind(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty()) return parsed::failure("no host");
  if (!v6 && url.host.size() == 9 && starts_with_ignoring_case(url.host, "localhost")) {
    url.host = "localhost";
  } else if (!is_ip_literal(url.host, v6)) {
    return parsed::failure(fmt::format(
        "{:?} is neither an IP address nor localhost (the upstream is this node's apiserver)",
        url.host));
  }
  if (port.empty()) {
    url.port = url.tls ? 443 : 80;
  } else {
    const auto number = parse_decimal<std::uint16_t>(port);
    if (!number || *number == 0) {
      return parsed::failure(fmt::format("port {:?} is not in 1..65535", port));
    }
    url.port = *number;
  }
  return parsed::success(std::move(url));
}

}  // namespace shim
