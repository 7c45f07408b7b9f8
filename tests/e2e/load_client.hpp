#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace e2e {

// One request as the load client saw it. Times are CLOCK_MONOTONIC microseconds.
struct request_record {
  bool reused = false;        // sent on the keep-alive connection (else on a new one)
  std::uint64_t send_us = 0;  // when the request started (connect, or write on a reused conn)
  std::uint64_t latency_us = 0;
  unsigned status = 0;   // HTTP status; 0 for a transport error
  std::string error;     // transport error kind when status == 0
  std::string backend;   // X-Backend of the answer
  bool retried = false;  // the reused connection was closed under the request; sent again
  // With client_go_retry_after: the answers with Retry-After that were waited out before this
  // one, and the first one's status. The field's samplers count such a request as failed.
  unsigned waited_out = 0;
  unsigned waited_out_status = 0;
  bool failed() const { return status < 200 || status > 299; }
};

struct load_options {
  std::uint16_t port = 0;  // the load balancer's frontend on 127.0.0.1
  std::string target = "/version";
  double rate = 100;  // requests per second on new connections, and on each keep-alive one
  std::chrono::milliseconds timeout{10'000};
  // GET for the sampler; a node agent's PATCH has a body. Like Go's transport, only an idempotent
  // request (GET, HEAD) is sent again after its reused connection broke under it.
  std::string method = "GET";
  std::string body{};
  std::string content_type{};
  // Two for the sampler: with round robin over two nodes, one of them is on the node that reboots.
  unsigned keep_alive_connections = 2;
  bool new_connections = true;  // the stream that opens a new connection per request
  // TLS to the apiserver, passed through by the load balancer (mode tcp); the server's
  // certificate is not verified (what is measured is disruption, not trust).
  bool tls = false;
  // Sent as `Authorization: Bearer` when set: realapi authorizes anonymous clients for /readyz and
  // /version only, and a kept-alive client must be authenticated to keep its connection.
  std::string bearer_token{};
  // When the keep-alive stream's next request goes, from the outcome of the last one: that long
  // after it ended. Empty: at the next slot of `rate`. A node agent's retry policy.
  std::function<std::chrono::microseconds(const request_record&)> pause_after{};
  // client-go's way with an answer that asks to be sent again (with_retry.go's checkWait): a 429
  // or a 5xx with a Retry-After of N seconds is waited out and the request sent again, on a new
  // connection when the answer closed its own, up to kClientGoMaxRetries times and within the
  // timeout. Off (the default), every non-2xx is a failure, as the field's disruption samplers
  // count it.
  bool client_go_retry_after = false;
};

// client-go's default maxRetries for a Retry-After.
inline constexpr unsigned kClientGoMaxRetries = 10;

// A steady stream of GETs through the load balancer, on its own thread, as the field's disruption
// samplers send them: one stream opens a new connection per request (requests are launched on
// schedule, even while earlier ones are still waiting), and two keep-alive connections each send
// the next request once the previous one is answered and its slot has come. The keep-alive
// connections are opened first, one after the other, so that round robin puts one on each node.
// With other options, one keep-alive connection and no new-connection stream, it is a node agent
// writing its node every few hundred milliseconds.
//
// Like Go's http.Transport (what the field's samplers and every Kubernetes client use), the
// keep-alive stream re-dials when the server closed the idle connection, and a GET that found the
// reused connection closed before any byte of an answer is sent once more on a new connection;
// such requests are marked `retried`. Every non-2xx answer and every other transport error
// (refused, reset during the answer, timeout) is a failure, except, with client_go_retry_after, an
// answer that client-go would wait out and send again: the request's outcome is then that of its
// last attempt, and `waited_out` says how many it took (kube-apiserver's
// --shutdown-send-retry-after answers 429 with Retry-After: 5 once its shutdown delay is over, and
// every Kubernetes client waits that out). A request waiting out a Retry-After is in flight:
// stop() waits for it.
class load_client {
 public:
  explicit load_client(load_options options);
  ~load_client();
  load_client(const load_client&) = delete;
  load_client& operator=(const load_client&) = delete;

  // Stops sending, waits (bounded by the timeout) for the requests in flight, joins the thread.
  void stop();
  std::vector<request_record> records() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Failed requests by connection and kind: "new:refused", "reused:http_503".
std::map<std::string, std::size_t> failed_by_kind(const std::vector<request_record>& records);
// The same as a table cell: "new:eof 2, reused:reset 1", or "-".
std::string failed_by_kind_text(const std::vector<request_record>& records);
// The requests that waited out a Retry-After (client_go_retry_after), by connection and the first
// such answer's status, as a table cell: "reused:http_429 1", or "-".
std::string waited_out_by_kind_text(const std::vector<request_record>& records);

void write_records_csv(const std::filesystem::path& path,
                       const std::vector<request_record>& records, std::uint64_t t0_us);

}  // namespace e2e
