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

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::milliseconds step = std::chrono::milliseconds(10));
void sleep_s(double s);

std::optional<pid_t> read_pid(const std::filesystem::path& pidfile);
std::filesystem::path read_first_line(const std::filesystem::path& path);
// GET /readyz on 127.0.0.1:port answered 200.
bool ready_200(std::uint16_t port);

// Ports for the servers of a run: the network namespace is ours alone, so a counter below the
// ephemeral range (32768 and up) gives ports nobody else holds, and a restarted apiserver gets its
// port back (an outgoing connection could have taken a port from the ephemeral range meanwhile).
std::uint16_t next_service_port();
// Brings up the loopback of the fresh network namespace.
void loopback_up();

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
