#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/result.hpp"

namespace shim {

// Where kube-apiserver's own /readyz is, as --upstream-readyz gives it.
struct upstream_url {
  bool tls = false;
  std::string host;  // an IP literal (without brackets) or "localhost"
  std::uint16_t port = 0;
  std::string target;  // path and query, "/readyz?verbose"

  // "https://localhost:6443/readyz"
  std::string text() const;
};

// Only the node's own apiserver is probed, so the host is an IP literal or "localhost" (always the
// loopback, RFC 6761): no resolver, whose getaddrinfo() would block the loop or need a thread.
// - The scheme and "localhost" are case-insensitive (RFC 3986) and come out lower case; IPv6 goes
//   in brackets; a missing or empty port is the scheme's (80, 443).
// - A URL without a path probes "/readyz", not "/": the flag names the readiness endpoint, and
//   kube-apiserver's "/" (a list of paths, 200 to any authenticated client) says nothing about
//   readiness, so reading it as "/" would make a check that passes whatever the server's state.
// - Refused: user info (use --upstream-token-file), a fragment, spaces, control bytes and
//   non-ASCII bytes anywhere (a request target is ASCII: percent-encode), ports outside 1..65535.
result<upstream_url> parse_upstream_url(std::string_view text);

// The --upstream-* flags.
struct upstream_settings {
  upstream_url url;  // host empty: no upstream check
  std::chrono::nanoseconds interval = std::chrono::seconds(1);
  std::chrono::nanoseconds timeout = std::chrono::seconds(1);
  unsigned fall = 3;
  unsigned rise = 2;
  std::string ca_file;      // empty: the system's trust store
  std::string server_name;  // the name to verify instead of the URL's host (kubeadm's "kubernetes")
  bool insecure_skip_verify = false;
  std::string client_cert;
  std::string client_key;
  std::string token_file;

  bool enabled() const { return !url.host.empty(); }
};

}  // namespace shim
