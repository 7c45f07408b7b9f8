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
};
// Takes arg into s when it is one of common_settings' flags (--drain, --exit-timeout, --inter,
// --fall, --rise, --rate, --request-time, --lead, --tail, --request-timeout, --out-dir,
// --haproxy, --check); throws std::invalid_argument for a bad value.
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

// The stand-in apiserver on 127.0.0.1:port, its pidfile and logs in dir named after it.
std::vector<std::string> apiserver_argv(const std::string& binary, const std::string& name,
                                        std::uint16_t port, const std::filesystem::path& dir,
                                        double shutdown_delay_s, double request_time_s);
// The shim on 127.0.0.1:port with the lock required and an event log, and no target yet.
std::vector<std::string> shim_argv(const std::string& shim, std::uint16_t port, double drain_s,
                                   double exit_timeout_s, const std::filesystem::path& event_log);

}  // namespace e2e
