#pragma once

#include <boost/beast/core/error.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "upstream/upstream_prober.hpp"

namespace shim {

// The bounds of an answer to the probe. kube-apiserver's /readyz?verbose is a few KiB; anything
// much larger is not a readiness answer.
inline constexpr std::uint64_t kMaxProbeBody = 64 * 1024;
inline constexpr std::uint32_t kMaxProbeHeader = 16 * 1024;

// What the probe knew when its error came.
struct probe_error_context {
  std::chrono::nanoseconds timeout{0};  // the probe's, for the timeout's text
  bool handshake = false;               // the error ended the TLS handshake
  long verify_result = 0;               // X509_V_OK (0) unless a verified handshake failed on it
};

// A failed probe's error as its outcome: the reason (a bounded metric label) and one line of text.
probe_outcome describe_probe_error(boost::beast::error_code ec, const probe_error_context& at);

// The first line of an error text (OpenSSL's may run over several).
std::string first_line(std::string text);

}  // namespace shim
