#include "readiness_server.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/beast/core/string.hpp>
#include <charconv>
#include <chrono>
#include <iterator>
#include <string_view>
#include <system_error>
#include <utility>

#include "event_recorder.hpp"
#include "http_server_state.hpp"
#include "logger.hpp"
#include "process_metrics.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kTextPlain = "text/plain; charset=utf-8";
constexpr std::string_view kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// What a /readyz query asks for: ?verbose ("?verbose", "?verbose=1", "?verbose=true", any case)
// and ?exclude=NAME, repeatable, as kube-apiserver's healthz takes them
// (k8s.io/apiserver/pkg/server/healthz/healthz.go, getExcludedChecks and handleRootHealth): an
// excluded check is shown as "[+]NAME excluded: ok" and does not count; a name that matches no
// check is ignored, and the body says so in a "warn:" line. Every other parameter is ignored. The
// request is bounded (kMaxRequestBytes), and so is the list.
// Distinct ?exclude names kept from one request: more than there are checks, and few enough that
// a 4 KiB query of a thousand unknown names cannot make the answer or the parse grow with it
// (fuzz_http_session's per-connection heap bound caught that; docs/benchmarks.md).
inline constexpr std::size_t kMaxExcluded = 16;

struct readyz_query {
  bool verbose = false;
  std::vector<std::string_view> excluded;
  bool excluded_truncated = false;  // names beyond kMaxExcluded were ignored
};

readyz_query parse_readyz_query(std::string_view target) {
  readyz_query out;
  const auto question = target.find('?');
  if (question == std::string_view::npos) return out;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = param.find('=');
    const std::string_view key = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1);
    if (key == "exclude") {
      if (std::find(out.excluded.begin(), out.excluded.end(), value) != out.excluded.end()) {
        continue;
      }
      if (out.excluded.size() == kMaxExcluded) {
        out.excluded_truncated = true;
      } else {
        out.excluded.push_back(value);
      }
    } else if (key == "verbose") {
      if (value.empty() || value == "1" || beast::iequals(value, "true")) out.verbose = true;
    }
  }
  return out;
}

// What route() decides; to_response() makes it an http_response, append_answer() the same bytes
// without one.
struct answer {
  http::status code = http::status::ok;
  std::string body;
  std::string_view content_type = kTextPlain;
};

// HEAD gets the status and Content-Length of the GET response and no body.
http_response to_response(const http_request& request, answer a) {
  http_response response{a.code, request.version()};
  response.set(http::field::content_type, a.content_type);
  response.set("X-Content-Type-Options", "nosniff");
  response.set(http::field::cache_control, "no-store");
  response.keep_alive(request.keep_alive());
  if (request.method() == http::verb::head) {
    response.content_length(a.body.size());
  } else {
    response.body() = std::move(a.body);
    response.prepare_payload();
  }
  if (a.code == http::status::method_not_allowed) response.set(http::field::allow, "GET, HEAD");
  return response;
}

// The bytes Beast's serializer writes for to_response(request, a), without building the message.
// Per keep-alive /readyz callgrind counted Beast's serializer, building the message and
// fmt::format_to each as a measurable cost over these appends (docs/benchmarks.md). The unit
// tests compare the two byte for byte.
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
    body += "warn: some health checks cannot be excluded: no matches for ";
    for (std::size_t i = 0; i < unmatched.size(); ++i) {
      body += fmt::format("{}{:?}", i == 0 ? "" : ",", unmatched[i]);
    }
    if (query.excluded_truncated) body += ",...";
    body += '\n';
  }
  body += ready ? "readyz check passed\n" : "readyz check failed\n";
  return body;
}

answer route(const shim_status& status, const http_request_counts& counts,
             const http_request& request) {
  const std::string_view target = request.target();
  const std::string_view path = path_of(target);
  const bool readyz = path == "/readyz";
  const bool metrics = path == "/metrics";
  if (!readyz && !metrics && path != "/livez" && path != "/healthz") {
    return {http::status::not_found, "404 page not found\n"};
  }
  if (request.method() != http::verb::get && request.method() != http::verb::head) {
    return {http::status::method_not_allowed, "405 method not allowed\n"};
  }
  if (metrics) return {http::status::ok, render_metrics(status, counts), kPrometheusText};
  if (readyz) {
    // No caching: every probe reads the status as it is now, and never waits for anything (the
    // upstream check is the last probe's outcome).
    const readyz_query query = parse_readyz_query(target);
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

void append_metric(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help, double value) {
  fmt::format_to(std::back_inserter(out), "# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help,
                 type, value);
}

void append_upstream_metrics(std::string& out, const upstream_status& upstream) {
  constexpr std::string_view kDuration = "shutdown_shim_upstream_probe_duration_seconds";
  fmt::format_to(std::back_inserter(out),
                 "# HELP {0} How long each probe of the upstream /readyz took, to its answer, its "
                 "failure or its timeout.\n# TYPE {0} histogram\n",
                 kDuration);
  const auto& bounds = upstream.bucket_bounds();
  const auto cumulative = upstream.cumulative_buckets();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", kDuration, bounds[i],
                   cumulative[i]);
  }
  fmt::format_to(std::back_inserter(out),
                 "{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {1}\n", kDuration,
                 upstream.probes(), upstream.duration_sum_seconds());
  out +=
      "# HELP shutdown_shim_upstream_probe_failures_total Failed probes of the upstream /readyz, "
      "by reason.\n"
      "# TYPE shutdown_shim_upstream_probe_failures_total counter\n";
  for (const auto& [reason, count] : upstream.failures()) {
    fmt::format_to(std::back_inserter(out),
                   "shutdown_shim_upstream_probe_failures_total{{reason=\"{}\"}} {}\n", reason,
                   count);
  }
  append_metric(out, "shutdown_shim_upstream_consecutive_failures", "gauge",
                "Failed probes of the upstream /readyz in a row (--upstream-fall turns the check "
                "failed).",
                upstream.health().consecutive_failures());
  append_metric(out, "shutdown_shim_upstream_consecutive_passes", "gauge",
                "Passed probes of the upstream /readyz in a row (--upstream-rise turns the check "
                "passed).",
                upstream.health().consecutive_passes());
}

// client_golang's names and HELP texts, so that dashboards made for any Go program work.
void append_process_metrics(std::string& out) {
  const process_figures p = read_process_figures();
  const auto append = [&out](std::string_view name, std::string_view type, std::string_view help,
                             const std::optional<double>& value) {
    if (value) append_metric(out, name, type, help, *value);
  };
  append("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         p.cpu_seconds);
  append("process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds);
  append("process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds);
  append("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         p.resident_bytes);
  append("process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.", p.start_time);
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

[[noreturn]] void throw_listen_error(const listen_address& address, const beast::error_code& ec) {
  const std::string what = "listen on " + format_listen_address(address);
  if (ec.category() == boost::system::system_category() ||
      ec.category() == boost::system::generic_category()) {
    // errno values: keep them comparable with std::errc.
    throw std::system_error(ec.value(), std::system_category(), what);
  }
  throw std::system_error(std::error_code(ec), what);
}

}  // namespace

std::size_t connection_cap(std::uint64_t descriptor_limit) {
  if (descriptor_limit <= kReservedDescriptors) return 1;
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(descriptor_limit - kReservedDescriptors, kMaxConnections));
}

http_response handle_request(const shim_status& status, http_request_counts& counts,
                             const http_request& request) {
  answer a = route(status, counts, request);
  counts.add(handler_of_path(path_of(request.target())), static_cast<unsigned>(a.code));
  return to_response(request, std::move(a));
}

bool append_response(const shim_status& status, http_request_counts& counts,
                     const http_request& request, std::string& out) {
  const answer a = route(status, counts, request);
  counts.add(handler_of_path(path_of(request.target())), static_cast<unsigned>(a.code));
  append_answer(out, request, a);
  return request.keep_alive();
}

void append_refusal(http_request_counts& counts, http::status code, std::string& out) {
  http_request request{http::verb::get, "", 11};
  request.keep_alive(false);
  append_answer(out, request, {code, std::string(refusal_text(code))});
  counts.add(http_handler::other, static_cast<unsigned>(code));
}

std::string render_metrics(const shim_status& status, const http_request_counts& counts) {
  std::string out;
  // The readiness table once: the ready gauge and each check's gauge are the same rows.
  const auto checks = status.checks();
  const bool ready = std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.ok; });
  append_metric(out, "shutdown_shim_ready", "gauge", "Whether /readyz answers 200 (1) or 503 (0).",
                ready ? 1 : 0);
  out +=
      "# HELP shutdown_shim_check Whether each readiness check passes (1) or fails (0), as "
      "/readyz?verbose lists them.\n"
      "# TYPE shutdown_shim_check gauge\n";
  for (const auto& check : checks) {
    fmt::format_to(std::back_inserter(out), "shutdown_shim_check{{name=\"{}\"}} {}\n", check.name,
                   check.ok ? 1 : 0);
  }
  append_metric(out, "shutdown_shim_draining", "gauge",
                "Whether a shutdown has started and the node is being drained.",
                status.draining ? 1 : 0);
  append_metric(out, "shutdown_shim_inhibitor_held", "gauge",
                "Whether the shim holds a systemd-logind delay inhibitor lock.",
                status.inhibitor == shim_status::inhibitor_state::held ? 1 : 0);
  const double start =
      status.draining_since
          ? std::chrono::duration<double>(status.draining_since->time_since_epoch()).count()
          : 0.0;
  append_metric(out, "shutdown_shim_shutdown_start_time_seconds", "gauge",
                "Unix time at which the current drain started, 0 if none.", start);
  append_metric(out, "shutdown_shim_drain_delay_seconds", "gauge",
                "How long a shutdown keeps the node unready, counted from the moment it turns "
                "unready; the target's signal goes out --signal-delay into it, then the drain "
                "runs on until it has elapsed.",
                seconds(status.drain_delay));
  append_metric(out, "shutdown_shim_hold_needed_seconds", "gauge",
                "How long the shim needs to hold a shutdown: drain delay plus exit timeout.",
                seconds(status.hold_needed));
  // Unknown is absent (docs/design.md, "Metrics"): until logind has said its InhibitDelayMaxUSec,
  // neither gauge is there, so an alert on too_short == 1 needs an absent() beside it.
  if (status.logind_delay_max_usec) {
    append_metric(out, "shutdown_shim_logind_inhibit_delay_max_seconds", "gauge",
                  "systemd-logind's InhibitDelayMaxUSec, in seconds; absent until logind has "
                  "said it.",
                  static_cast<double>(*status.logind_delay_max_usec) / 1e6);
    append_metric(out, "shutdown_shim_logind_inhibit_delay_too_short", "gauge",
                  "Whether logind would end a shutdown hold before the shim is done (1) or not "
                  "(0); absent until logind has said its InhibitDelayMaxUSec.",
                  status.logind_delay_too_short() ? 1 : 0);
  }
  if (status.previous) {
    append_metric(out, "shutdown_shim_previous_shutdown_clean", "gauge",
                  "Whether the last shutdown of an earlier boot drained in full (1) or not (0), "
                  "from the event log at start; absent when there is none.",
                  status.previous->clean() ? 1 : 0);
    if (status.previous->hold) {
      append_metric(out, "shutdown_shim_previous_shutdown_hold_seconds", "gauge",
                    "How long the last shutdown of an earlier boot was held, unready to the lock's "
                    "release; absent when its records do not say (a hold cut short).",
                    *status.previous->hold);
    }
  }
  append_metric(out, "shutdown_shim_kubelet_cuts_drain", "gauge",
                "Whether kubelet's graceful node shutdown will SIGKILL kube-apiserver before "
                "drain delay plus exit timeout or before the pod's own grace (1) or not, or not "
                "known (0); see the check kubelet-shutdown.",
                status.kubelet.cuts_drain() ? 1 : 0);
  append_metric(out, "shutdown_shim_kubelet_second_signal", "gauge",
                "Whether kube-apiserver may get a second SIGTERM, kubelet's after the shim's (1): "
                "kubelet's lock is listed but its plan not known, so the shim signals at once. "
                "Always 0 when the plan is known (the shim then leaves the signal to kubelet) and "
                "in wrapper mode.",
                status.kubelet.second_signal() ? 1 : 0);
  fmt::format_to(std::back_inserter(out),
                 "# HELP shutdown_shim_signals_forwarded_total Signals sent to the target.\n"
                 "# TYPE shutdown_shim_signals_forwarded_total counter\n"
                 "shutdown_shim_signals_forwarded_total {}\n",
                 status.signals_forwarded);
  append_metric(out, "shutdown_shim_log_lines_dropped_total", "counter",
                "Log lines dropped because stderr could not take them (queue full or reader gone).",
                static_cast<double>(status.log ? status.log->dropped_lines() : 0));
  out +=
      "# HELP shutdown_shim_events_total Lifecycle events since the start, by event (each is "
      "logged, and written to --event-log when there is one).\n"
      "# TYPE shutdown_shim_events_total counter\n";
  for (std::size_t i = 0; i < kEvents.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "shutdown_shim_events_total{{event=\"{}\"}} {}\n",
                   kEvents[i].name,
                   status.events ? status.events->recorded(static_cast<event_kind>(i)) : 0);
  }
  append_metric(out, "shutdown_shim_event_records_failed_total", "counter",
                "Event log records that could not be written (ENOSPC, EIO, ...).",
                static_cast<double>(status.events ? status.events->failed_records() : 0));
  out +=
      "# HELP shutdown_shim_http_requests_total HTTP responses sent, by status code and handler "
      "(the endpoint; other: an unknown path or a request refused before routing).\n"
      "# TYPE shutdown_shim_http_requests_total counter\n";
  for (const auto& [key, count] : counts.all()) {
    fmt::format_to(std::back_inserter(out),
                   "shutdown_shim_http_requests_total{{code=\"{}\",handler=\"{}\"}} {}\n",
                   key.second, to_string(key.first), count);
  }
  if (status.upstream) append_upstream_metrics(out, *status.upstream);
  append_process_metrics(out);
#ifdef SHUTDOWN_SHIM_VERSION
  out +=
      "# HELP shutdown_shim_build_info The shim's version.\n"
      "# TYPE shutdown_shim_build_info gauge\n"
      "shutdown_shim_build_info{version=\"" SHUTDOWN_SHIM_VERSION "\"} 1\n";
#endif
  return out;
}

struct readiness_server::impl {
  std::shared_ptr<http_server_state> state;
};

readiness_server::readiness_server(asio::io_context& io, const shim_status& status,
                                   http_limits limits)
    : impl_(std::make_unique<impl>(impl{std::make_shared<http_server_state>(io, status, limits)})) {
}

readiness_server::~readiness_server() { stop(); }

void readiness_server::listen(const std::vector<listen_address>& addresses) {
  auto& state = *impl_->state;
  // All or nothing: nothing is listening when one of the addresses fails.
  std::vector<std::shared_ptr<http_server_state::listener>> opened;
  for (const auto& address : addresses) {
    beast::error_code ec;
    const auto ip = asio::ip::make_address(address.host, ec);
    if (ec) throw_listen_error(address, ec);
    const tcp::endpoint endpoint{ip, address.port};
    auto l = std::make_shared<http_server_state::listener>(state.io);
    auto& acceptor = l->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (ec) throw_listen_error(address, ec);
    // Not inherited by a child started in wrapper mode.
    ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (ec) throw_listen_error(address, ec);
    if (ip.is_v6()) {
      // So that 0.0.0.0:P and [::]:P can both be bound.
      acceptor.set_option(asio::ip::v6_only(true), ec);
      if (ec) throw_listen_error(address, ec);
    }
    acceptor.bind(endpoint, ec);
    if (ec) throw_listen_error(address, ec);
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw_listen_error(address, ec);
    opened.push_back(std::move(l));
  }
  state.stopped = false;
  if (state.limits.max_connections == 0) {
    rlimit descriptors{};
    ::getrlimit(RLIMIT_NOFILE, &descriptors);
    state.limits.max_connections = connection_cap(descriptors.rlim_cur);
  }
  for (auto& l : opened) {
    state.endpoints.push_back(l->acceptor.local_endpoint());
    state.listeners.push_back(l);
    state.accept(l);
  }
}

std::vector<tcp::endpoint> readiness_server::endpoints() const { return impl_->state->endpoints; }

const http_request_counts& readiness_server::request_counts() const { return impl_->state->counts; }

void readiness_server::stop() { impl_->state->stop(); }

}  // namespace shim
