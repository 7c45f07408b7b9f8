#include "http/http_answer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <charconv>
#include <iterator>
#include <string_view>
#include <utility>

#include "http/http_limits.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/request_head_parser.hpp"
#include "http/url_query.hpp"
#include "util/joined.hpp"

namespace shim {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr std::string_view kTextPlain = "text/plain; charset=utf-8";
constexpr std::string_view kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";

// What a /readyz query asks for: ?verbose ("?verbose", "?verbose=1", "?verbose=true", any case)
// and ?exclude=NAME, repeatable, as kube-apiserver's healthz takes them
// (k8s.io/apiserver/pkg/server/healthz/healthz.go, getExcludedChecks and handleRootHealth): an
// excluded check is shown as "[+]NAME excluded: ok" and does not count; a name that matches no
// check is ignored, and the body says so in a "warn:" line. Every other parameter is ignored. The
// request is bounded (kMaxRequestBytes), and so is the list: more names than there are checks,
// and few enough that a query of a thousand unknown names cannot make the answer grow with it.
inline constexpr std::size_t kMaxExcluded = 16;

struct readyz_query {
  bool verbose = false;
  std::vector<std::string_view> excluded;
  bool excluded_truncated = false;  // names beyond kMaxExcluded were ignored
};

readyz_query parse_readyz_query(std::string_view target) {
  readyz_query out;
  std::string_view query = query_of(target);
  while (const auto item = next_query_item(query)) {
    if (item->key == "exclude") {
      if (std::find(out.excluded.begin(), out.excluded.end(), item->value) != out.excluded.end()) {
        continue;
      }
      if (out.excluded.size() == kMaxExcluded) {
        out.excluded_truncated = true;
      } else {
        out.excluded.push_back(item->value);
      }
    } else if (item->key == "verbose") {
      const auto v = item->value;
      if (v.empty() || v == "1" || beast::iequals(v, "true")) out.verbose = true;
    }
  }
  return out;
}

// What route() decides; append_answer() writes it.
struct answer {
  http::status code = http::status::ok;
  std::string body;
  std::string_view content_type = kTextPlain;
};

// The bytes Beast's serializer writes for the answer as an http::response, without building one,
// which costs each keep-alive /readyz (docs/benchmarks.md). HEAD gets the GET answer's status and
// Content-Length and no body.
void append_answer(std::string& out, const http_request& request, const answer& a) {
  const unsigned version = request.version();
  char digits[24];
  out += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out.append(digits, std::to_chars(digits, std::end(digits), static_cast<unsigned>(a.code)).ptr);
  out += ' ';
  out += http::obsolete_reason(a.code);
  out += "\r\nContent-Type: ";
  out += a.content_type;
  out += "\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n";
  // Beast's keep_alive(): HTTP/1.1 says only "close", HTTP/1.0 only "keep-alive".
  if (version < 11 && request.keep_alive()) out += "Connection: keep-alive\r\n";
  if (version >= 11 && !request.keep_alive()) out += "Connection: close\r\n";
  out += "Content-Length: ";
  out.append(digits, std::to_chars(digits, std::end(digits), a.body.size()).ptr);
  out += "\r\n";
  if (a.code == http::status::method_not_allowed) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  if (request.method() != http::verb::head) out += a.body;
}

// The kube format, from the same table as the status code: "[+]name ok", "[-]name failed: ...",
// "[+]name excluded: ok", then "readyz check passed" or "readyz check failed".
std::string readyz_body(const shim_status& status, bool ready, const readyz_query& query) {
  if (ready && !query.verbose) return "ok";
  std::string body;
  std::vector<std::string_view> unmatched = query.excluded;
  for (const auto& check : status.checks()) {
    if (auto it = std::find(unmatched.begin(), unmatched.end(), check.name);
        it != unmatched.end()) {
      unmatched.erase(it);
      body += fmt::format("[+]{} excluded: ok\n", check.name);
      continue;
    }
    if (check.ok) {
      body += fmt::format("[+]{} ok", check.name);
      // Passing checks can carry news too, such as the logind delay warning.
      if (query.verbose && !check.detail.empty()) body += fmt::format(": {}", check.detail);
    } else if (!query.verbose) {
      // Like kube: the plain form only says which check failed.
      body += fmt::format("[-]{} failed: reason withheld", check.name);
    } else if (check.detail.empty()) {
      body += fmt::format("[-]{} failed", check.name);
    } else {
      body += fmt::format("[-]{} failed: {}", check.name, check.detail);
    }
    body += '\n';
  }
  if (!unmatched.empty()) {
    body += "warn: some health checks cannot be excluded: no matches for " +
            joined(unmatched, ",", [](std::string_view name) { return fmt::format("{:?}", name); });
    if (query.excluded_truncated) body += ",...";
    body += '\n';
  }
  body += ready ? "readyz check passed\n" : "readyz check failed\n";
  return body;
}

http_handler handler_of_path(std::string_view path) {
  if (path == "/readyz") return http_handler::readyz;
  if (path == "/livez") return http_handler::livez;
  if (path == "/healthz") return http_handler::healthz;
  if (path == "/metrics") return http_handler::metrics;
  return http_handler::other;
}

answer route(const shim_status& status, const http_request_counts& counts,
             const http_request& request, http_handler handler) {
  if (handler == http_handler::other) return {http::status::not_found, "404 page not found\n"};
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    return {http::status::method_not_allowed, "405 method not allowed\n"};
  }
  if (handler == http_handler::metrics) {
    return {http::status::ok, render_metrics(status, counts), kPrometheusText};
  }
  if (handler == http_handler::readyz) {
    // No caching: every probe reads the status as it is now, and never waits for anything (the
    // upstream check is the last probe's outcome).
    const readyz_query query = parse_readyz_query(request.target());
    const bool ready = status.ready(query.excluded);
    return {ready ? http::status::ok : http::status::service_unavailable,
            readyz_body(status, ready, query)};
  }
  // Liveness only says the event loop turns, which it does while it answers this.
  return {http::status::ok, "ok"};
}

std::string_view refusal_text(http::status code) {
  switch (code) {
    case http::status::request_header_fields_too_large:
      return "431 request header fields too large\n";
    case http::status::payload_too_large:
      return "413 request entity too large\n";
    default:
      return "400 bad request\n";
  }
}

}  // namespace

appended_response append_response(const shim_status& status, http_request_counts& counts,
                                  const http_request& request, std::string& out) {
  const http_handler handler = handler_of_path(path_of(request.target()));
  const answer a = route(status, counts, request, handler);
  counts.add(handler, static_cast<unsigned>(a.code));
  append_answer(out, request, a);
  return {.keep_alive = request.keep_alive(), .handler = handler, .code = a.code};
}

void append_closing_answer(http::status code, std::string_view body, std::string& out,
                           std::string_view content_type) {
  http_request request{http::verb::get, "", 11};
  request.keep_alive(false);
  append_answer(out, request, {code, std::string(body), content_type});
}

void append_refusal(http::status code, http_request_counts& counts, std::string& out) {
  append_closing_answer(code, refusal_text(code), out);
  counts.add(http_handler::other, static_cast<unsigned>(code));
}

http_answers readiness_answers(const shim_status& status, readyz_observer observer) {
  return {
      // Every prober gets the same answer; the observer learns who probed and what they got.
      .respond =
          [&status, observer = std::move(observer)](const http_request& request,
                                                    const http_peer& peer,
                                                    http_request_counts& counts, std::string& out) {
            const auto sent = append_response(status, counts, request, out);
            if (observer && sent.handler == http_handler::readyz) {
              if (const auto* tcp = std::get_if<tcp_peer>(&peer)) {
                observer(
                    tcp->address, sent.code == http::status::ok,
                    request[http::field::user_agent] == request_head_parser::kKubeletProbeAgent);
              }
            }
            return sent.keep_alive;
          },
      .refuse = append_refusal,
  };
}

}  // namespace shim
