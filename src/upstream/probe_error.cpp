#include "upstream/probe_error.hpp"

#include <fmt/format.h>
#include <openssl/x509.h>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include "util/duration_text.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string first_line(std::string text) {
  text = text.substr(0, text.find('\n'));
  return text;
}

probe_outcome describe_probe_error(beast::error_code ec, const probe_error_context& at) {
  if (ec == beast::error::timeout) {
    return {.failure = probe_failure::timeout,
            .error = "timeout after " + format_duration(at.timeout)};
  }
  if (ec == asio::error::connection_refused) {
    return {.failure = probe_failure::refused, .error = "connection refused"};
  }
  if (ec == http::error::header_limit) {
    return {.failure = probe_failure::oversize,
            .error = fmt::format("answer's header block larger than {} bytes", kMaxProbeHeader)};
  }
  if (ec == http::error::body_limit || ec == http::error::buffer_overflow) {
    return {.failure = probe_failure::oversize,
            .error = fmt::format("answer's body larger than {} bytes", kMaxProbeBody)};
  }
  if (at.handshake) {
    if (at.verify_result != X509_V_OK) {
      return {.failure = probe_failure::tls,
              .error = std::string("certificate verify failed: ") +
                       X509_verify_cert_error_string(at.verify_result)};
    }
    return {.failure = probe_failure::tls, .error = "TLS handshake: " + first_line(ec.message())};
  }
  // In TLS 1.3 the client's handshake is over before the server has checked the client
  // certificate: its refusal ("tlsv13 alert certificate required", "tlsv1 alert unknown ca")
  // arrives with the answer (UpstreamProbe.MutualTlsRequired).
  if (ec.category() == asio::error::get_ssl_category()) {
    return {.failure = probe_failure::tls, .error = "TLS: " + first_line(ec.message())};
  }
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() ||
      ec == asio::error::eof) {
    return {.failure = probe_failure::protocol, .error = first_line(ec.message())};
  }
  return {.failure = probe_failure::connect, .error = first_line(ec.message())};
}

}  // namespace shim
