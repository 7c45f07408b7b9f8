#pragma once

// What the e2e programs (e2e_disruption, e2e_rolling) share: flags, waits, the private network
// namespace, ports, and the command lines of the stand-in apiserver and the shim.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "load_client.hpp"
#include "process.hpp"

namespace e2e {

// A duration as the shim's and the stand-ins' flags take it: "1500ms".
std::string seconds(double s);
// "3", "3s", "1.5s", "500ms", "1m10s"; throws std::invalid_argument.
double parse_seconds(std::string_view text);
// The value of `--name=value`, if arg is that flag.
std::optional<std::string> flag(std::string_view arg, std::string_view name);

// The flags both programs take: the shim's and the stand-in apiserver's timings, HAProxy's
// checks, the load, where the output goes.
struct common_settings {
  double drain_s = 3;          // the shim's --drain-delay and the apiserver's shutdown delay
  double exit_timeout_s = 10;  // the shim's --exit-timeout
  std::string inter = "1s";
  unsigned fall = 2;
  unsigned rise = 2;
  double rate = 200;  // per stream (the keep-alive stream is bounded by 1 / request time)
  // The stand-in apiserver's time to answer a request: a real GET takes milliseconds, so requests
  // are in flight on a node when it dies.
  double request_time_s = 0.015;
  double lead_s = 2;              // load before the reboot
  double tail_s = 2;              // load after the last event
  double request_timeout_s = 10;  // a request not answered by then is a failure
  std::filesystem::path out_dir = "e2e-out";
  bool check = false;
  std::string haproxy = "/usr/sbin/haproxy";
  // --server=real: kube-apiserver is tests/realapi's realapi (the real k8s.io/apiserver) from
  // --realapi-dir (what scripts/realapi prints), over TLS, with the client-go node agents beside
  // the load; else the stand-in, tests/sandbox/fake_apiserver.
  bool real_server = false;
  std::filesystem::path realapi_dir;
};
// Takes arg into s when it is one of common_settings' flags (--drain, --exit-timeout, --inter,
// --fall, --rise, --rate, --request-time, --lead, --tail, --request-timeout, --out-dir,
// --haproxy, --check, --server, --realapi-dir); throws std::invalid_argument for a bad value.
bool parse_common_flag(std::string_view arg, common_settings& s);

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::milliseconds step = std::chrono::milliseconds(10));
void sleep_s(double s);

std::optional<pid_t> read_pid(const std::filesystem::path& pidfile);
std::filesystem::path read_first_line(const std::filesystem::path& path);
// GET /readyz on 127.0.0.1:port answered 200.
bool ready_200(std::uint16_t port);
// What a shim on 127.0.0.1:port says: a metric's value from /metrics, and the line of one check of
// /readyz?verbose ("[+]signal-plan ..."). Nothing when it is not there or the shim did not answer.
// /metrics is no probe; /readyz?verbose is one (the shim takes every /readyz from a TCP peer for a
// load balancer's check), so a test that wants the shim to have seen none reads the check last.
std::optional<double> shim_metric(std::uint16_t port, const std::string& name);
std::optional<std::string> shim_check_line(std::uint16_t port, const std::string& check);

// Ports for the servers of a run: the network namespace is ours alone, so a counter below the
// ephemeral range (32768 and up) gives ports nobody else holds, and a restarted apiserver gets its
// port back (an outgoing connection could have taken a port from the ephemeral range meanwhile).
std::uint16_t next_service_port();
// Moves this process into a network namespace of its own, its loopback up, where ports, HAProxy
// and loopback traffic touch nothing of the machine's; false (and why, on stderr) if it cannot.
bool enter_private_network();

// Why the e2e test cannot run here (not root, a tool missing), or nothing.
std::optional<std::string> missing_tool(const std::string& haproxy);
// The exit status for a test that cannot run: 77 (skipped), or 1 under CI=true.
int cannot_run(const std::string& why);

// A node run in a child process of the test (the test's own binary in a node mode), which names its
// sandbox directory in dir_file. Stopped with SIGTERM, the node removes that directory itself;
// killed, it cannot, so it is removed here, or by this process's termination cleanup.
void stop_node_process(sandbox::child_process& process, const std::filesystem::path& dir_file);

// The bearer token realapi accepts (its user `node-agent`) and every client of a real run sends.
inline constexpr std::string_view kRealapiToken = "e2e-node-agent-token";

// The kube-apiserver a node runs, and how clients reach it: the one place where the stand-in and
// realapi differ.
struct api_server {
  bool real = false;
  std::string binary;  // fake_apiserver, or realapi
  // Its serving certificate and key (sandbox::test_pki's, for DNS:localhost and IP:127.0.0.1), and
  // the CA that signed them; empty: plain HTTP (the stand-in without --production).
  std::filesystem::path cert, key, ca;
  bool tls() const { return !cert.empty(); }
  // The token clients send: realapi's, none for the stand-in (it authenticates nobody).
  std::string token() const { return real ? std::string(kRealapiToken) : std::string(); }
};
// The server the settings ask for (the stand-in's binary from the sandbox's tools), with TLS files
// made by sandbox::test_pki in pki_dir; an empty pki_dir: plain HTTP, which only the stand-in
// serves (realapi serves TLS only).
api_server make_api_server(const common_settings& s, const std::string& fake_apiserver,
                           const std::filesystem::path& pki_dir);
// The same server in a node's child process: the flags that carry it, and their parser (false when
// arg is none of them).
std::vector<std::string> server_flags(const api_server& server);
bool parse_server_flag(std::string_view arg, api_server& server);

// kube-apiserver on 127.0.0.1:port, its pidfile and logs in dir named after it, with the shutdown
// delay (the library's own --shutdown-delay-duration on realapi). The stand-in also takes the time
// it takes to answer a request (realapi answers as fast as it can).
std::vector<std::string> apiserver_argv(const api_server& server, const std::string& name,
                                        std::uint16_t port, const std::filesystem::path& dir,
                                        double shutdown_delay_s, double request_time_s);
// "https" or "http", for the shim's --upstream-readyz.
std::string api_scheme(const api_server& server);
// The load client's options for one server: TLS and the token as the server wants them.
void set_client_auth(const api_server& server, load_options& options);
// Whether a GET /version through the load balancer on fe_port was answered by each of the nodes
// within timeout (over TLS with the token where the server wants it).
bool answered_by(const api_server& server, std::uint16_t fe_port,
                 const std::vector<std::string>& nodes, std::chrono::milliseconds timeout);
// The shim on 127.0.0.1:port with the lock required, an event log and its node's state directory
// (each node's /run: one shim holds a state directory), and no target yet.
std::vector<std::string> shim_argv(const std::string& shim, std::uint16_t port, double drain_s,
                                   double exit_timeout_s, const std::filesystem::path& event_log,
                                   const std::filesystem::path& state_dir);

}  // namespace e2e
