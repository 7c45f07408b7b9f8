#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shim {

// The requests the readiness server parses (it writes its answers without building a message).
using http_request = boost::beast::http::request<boost::beast::http::string_body>;

// Parses a request head into what the readiness server routes on: method, target, version and
// keep-alive. The fields themselves are dropped as they are parsed: Beast's request_parser keeps
// each as a heap node far larger than a tiny line "a:\r\n"
// (ReadinessServerTest.AHeadOfManyTinyFieldsHoldsNoMoreThanItsBytes). basic_parser itself still
// reads Connection, Content-Length and Transfer-Encoding.
class request_head_parser final : public boost::beast::http::basic_parser<true> {
 public:
  // What kubelet's probes send as User-Agent, and the one value of it a request keeps.
  static constexpr std::string_view kKubeletProbeAgent = "kube-probe/";

  // The request line, and the Connection field that keep-alive implies; no other field but a
  // User-Agent of kKubeletProbeAgent for a kubelet's probe (the load-balancer figures leave
  // those out).
  const http_request& get() const { return request_; }
  // Whether the head had a Transfer-Encoding field, of any coding.
  bool transfer_coded() const { return transfer_coded_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  using field = boost::beast::http::field;
  using verb = boost::beast::http::verb;

  void on_request_impl(verb method, string_view method_string, string_view target, int version,
                       error_code& ec) override;
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  // The session reads heads only (http::async_read_header), so no body callback ever runs.
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  http_request request_;
  bool transfer_coded_ = false;
};

}  // namespace shim
