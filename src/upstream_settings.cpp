#include "upstream_settings.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <charconv>

namespace shim {

namespace {

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
  upstream_url url;
  std::string_view rest = text;
  if (rest.starts_with("https://")) {
    url.tls = true;
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return parsed::failure("want an http:// or https:// URL, e.g. https://localhost:6443/readyz");
  }
  const auto path = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path);
  std::string_view target = path == std::string_view::npos ? "/" : rest.substr(path);
  if (target.find('#') != std::string_view::npos) return parsed::failure("a fragment is not sent");
  if (target.front() == '?') url.target = "/";
  url.target += target;
  for (char c : url.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7F) {
      return parsed::failure("the path has a space or a control character");
    }
  }
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
  if (url.host != "localhost" && !is_ip_literal(url.host, v6)) {
    return parsed::failure(fmt::format(
        "{:?} is neither an IP address nor localhost (the upstream is this node's apiserver)",
        url.host));
  }
  if (port.empty()) {
    url.port = url.tls ? 443 : 80;
  } else {
    unsigned number = 0;
    const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (error != std::errc() || end != port.data() + port.size() || number < 1 || number > 65535) {
      return parsed::failure(fmt::format("port {:?} is not in 1..65535", port));
    }
    url.port = static_cast<std::uint16_t>(number);
  }
  return parsed::success(std::move(url));
}

}  // namespace shim
