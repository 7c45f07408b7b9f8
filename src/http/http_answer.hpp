#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/status.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "http/http_connections.hpp"
#include "http/http_request_counts.hpp"
#include "readiness/shim_status.hpp"

namespace shim {

// What the readiness server answers (/readyz[?verbose][&exclude=NAME], /livez, /healthz, /metrics),
// from the status table as it is now: one request in, the bytes of one response appended to `out`,
// and whether the connection stays open after it; its handler and status code. Counts the
// response's status code under its handler in `counts`.
struct appended_response {
  bool keep_alive = false;
  http_handler handler = http_handler::other;
  boost::beast::http::status code = boost::beast::http::status::ok;
};
appended_response append_response(const shim_status& status, http_request_counts& counts,
                                  const http_request& request, std::string& out);

// A plain-text answer `code` with `body`, after which the connection closes (HTTP/1.1, Connection:
// close), appended to `out`.
void append_closing_answer(boost::beast::http::status code, std::string_view body, std::string& out,
                           std::string_view content_type = "text/plain; charset=utf-8");

// The server's answer to a request it refuses before routing (malformed, too large, a body),
// appended to `out`; the connection closes after it. Counted in `counts`, as handler "other".
void append_refusal(boost::beast::http::status code, http_request_counts& counts, std::string& out);

// The connections' answers from `status`, which must outlive them (a connection answers nothing
// once the server has stopped).
// Told of each /readyz answer to a TCP peer (the load balancer's health checkers, issue 23):
// who asked, whether the answer was 200, and whether the request was kubelet's probe (User-Agent
// kube-probe/...).
using readyz_observer =
    std::function<void(const boost::asio::ip::address& from, bool ready, bool kubelet_probe)>;

http_answers readiness_answers(const shim_status& status, readyz_observer observer = {});

}  // namespace shim
