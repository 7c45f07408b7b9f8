#include "bench_http.hpp"

#include <fmt/core.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <system_error>

#include "bench_node.hpp"
#include "bench_proc.hpp"
#include "process.hpp"

extern char** environ;

namespace bench {

using namespace std::chrono_literals;
using sandbox::monotonic_us;

double latency_ms(const std::string& value, const std::string& unit) {
  const double v = std::stod(value);
  if (unit == "us") return v / 1000;
  if (unit == "ms") return v;
  if (unit == "s") return v * 1000;
  return v * 60'000;  // "m"
}

wrk_result parse_wrk(const std::string& text) {
  wrk_result r;
  std::smatch m;
  if (std::regex_search(text, m, std::regex(R"(Requests/sec:\s+([0-9.]+))"))) {
    r.requests_per_s = std::stod(m[1]);
  }
  if (std::regex_search(text, m, std::regex(R"(\n\s+50%\s+([0-9.]+)(us|ms|s|m)\b)"))) {
    r.p50_ms = latency_ms(m[1], m[2]);
  }
  if (std::regex_search(text, m, std::regex(R"(\n\s+99%\s+([0-9.]+)(us|ms|s|m)\b)"))) {
    r.p99_ms = latency_ms(m[1], m[2]);
  }
  if (std::regex_search(
          text, m,
          std::regex(R"(Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+))"))) {
    for (int i = 1; i <= 4; ++i) r.socket_errors += std::stoull(m[i]);
  }
  if (std::regex_search(text, m, std::regex(R"((\d+) requests in )"))) {
    r.requests = std::stoull(m[1]);
  }
  if (std::regex_search(text, m, std::regex(R"(Non-2xx or 3xx responses: (\d+))"))) {
    r.non_2xx = std::stoull(m[1]);
  }
  return r;
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

// CPU ticks of every process in process group pgid (a server and its workers).
std::uint64_t group_cpu_ticks(pid_t pgid) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    const std::string stat = sandbox::read_text_file(entry.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream in(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0, pgrp = 0;
    if (in >> state >> ppid >> pgrp && pgrp == pgid) total += cpu_ticks(std::stoi(name));
  }
  return total;
}

struct http_server {
  std::string name;
  std::uint16_t port = 0;
  pid_t pgid = 0;
};

wrk_result run_wrk(const options& o, const http_server& server, bool new_connections,
                   const std::filesystem::path& log) {
  std::vector<std::string> argv{"/usr/bin/wrk", fmt::format("-t{}", o.wrk_threads),
                                fmt::format("-c{}", o.wrk_connections),
                                fmt::format("-d{}s", o.wrk_seconds), "--latency"};
  if (new_connections) {
    argv.push_back("-H");
    argv.push_back("Connection: close");
  }
  argv.push_back(fmt::format("http://127.0.0.1:{}/readyz", server.port));
  std::error_code ec;
  std::filesystem::remove(log, ec);
  sandbox::spawn_options so;
  so.env = environment();
  so.stdout_path = log;
  const auto ticks0 = group_cpu_ticks(server.pgid);
  const auto t0 = monotonic_us();
  sandbox::child_process wrk("wrk", argv, so);
  auto status = wrk.wait_for_exit(std::chrono::seconds(o.wrk_seconds + 60));
  require(status && sandbox::shell_exit_code(*status) == 0, "wrk failed: see " + log.string());
  const double seconds = static_cast<double>(monotonic_us() - t0) / 1e6;
  auto r = parse_wrk(sandbox::read_text_file(log));
  const double cpu_s = static_cast<double>(group_cpu_ticks(server.pgid) - ticks0) /
                       static_cast<double>(sysconf(_SC_CLK_TCK));
  r.server_cpu = cpu_s / seconds;
  r.cpu_us_per_request = cpu_s * 1e6 / static_cast<double>(std::max<std::uint64_t>(r.requests, 1));
  require(!std::isnan(r.requests_per_s) && !std::isnan(r.p99_ms),
          "cannot read wrk's output: " + log.string());
  return r;
}

http_report run_http(sandbox::node_sandbox& sb, const options& o) {
  http_report report;
  const auto dir = sb.path("http");
  std::filesystem::create_directories(dir / "nginx");

  auto shim = spawn_shim(sb, "http-shim", {"--inhibit=required"});
  wait_shim_ready_and_locked(sb, shim);
  // The same, with its upstream check polling an HTTPS apiserver all the while.
  tls_apiserver api(sb);
  auto polling_flags = api.shim_flags();
  polling_flags.push_back("--inhibit=off");
  auto polling = spawn_shim(sb, "http-shim-upstream", polling_flags);
  require(wait_http_200(polling.port, 30s), "the shim with the upstream check did not get ready");

  const std::uint16_t nginx_port = sandbox::pick_free_port();
  const auto nginx_conf = dir / "nginx" / "nginx.conf";
  {
    std::ofstream f(nginx_conf);
    // One worker, no access log (the shim logs no requests either), keep-alive connections not
    // closed after nginx's default 1000 requests (the shim and HAProxy have no such limit).
    f << fmt::format(
        "worker_processes 1;\ndaemon off;\npid {0}/nginx.pid;\nerror_log {0}/error.log;\n"
        "events {{ worker_connections 4096; }}\n"
        "http {{\n  access_log off;\n  keepalive_requests 100000000;\n"
        "  client_body_temp_path {0}/body;\n  proxy_temp_path {0}/proxy;\n"
        "  fastcgi_temp_path {0}/fastcgi;\n  uwsgi_temp_path {0}/uwsgi;\n"
        "  scgi_temp_path {0}/scgi;\n"
        "  server {{\n    listen 127.0.0.1:{1};\n    location = /readyz {{ return 200 \"ok\"; }}\n"
        "  }}\n}}\n",
        (dir / "nginx").string(), nginx_port);
  }
  sandbox::spawn_options so;
  so.env = environment();
  so.stdout_path = dir / "nginx.log";
  sandbox::child_process nginx("nginx",
                               {"/usr/sbin/nginx", "-p", (dir / "nginx").string(), "-c",
                                nginx_conf.string(), "-e", (dir / "nginx" / "error.log").string()},
                               so);

  const std::uint16_t haproxy_port = sandbox::pick_free_port();
  const auto haproxy_conf = dir / "haproxy.cfg";
  {
    std::ofstream f(haproxy_conf);
    // One thread, like nginx's one worker; monitor-uri answers /readyz itself.
    f << fmt::format(
        "global\n  nbthread 1\n  maxconn 4096\n\n"
        "defaults\n  mode http\n  timeout client 30s\n  timeout connect 5s\n"
        "  timeout server 30s\n  timeout http-keep-alive 30s\n\n"
        "frontend readyz\n  bind 127.0.0.1:{}\n  monitor-uri /readyz\n",
        haproxy_port);
  }
  so.stdout_path = dir / "haproxy.log";
  sandbox::child_process haproxy("haproxy",
                                 {"/usr/sbin/haproxy", "-db", "-f", haproxy_conf.string()}, so);

  require(wait_http_200(nginx_port, 30s), "nginx did not answer 200 on /readyz");
  require(wait_http_200(haproxy_port, 30s), "HAProxy did not answer 200 on /readyz");

  report.shim_hwm_before_kb = proc_status_kb(shim.process->pid())["VmHWM"];
  std::vector<http_server> servers{{"shutdown-shim", shim.port, shim.process->pid()},
                                   {kPollingServer, polling.port, polling.process->pid()},
                                   {"nginx", nginx_port, nginx.pid()},
                                   {"HAProxy monitor-uri", haproxy_port, haproxy.pid()}};
  // Other builds of the shim (a change against its base, say), interleaved with the rest.
  std::vector<running_shim> variants;
  for (const auto& [label, binary] : o.shim_variants) {
    variants.push_back(spawn_shim(sb, "http-shim-" + std::to_string(variants.size()),
                                  {"--inhibit=required"}, {}, binary));
    require(wait_http_200(variants.back().port, 30s), "shim variant " + label + " not ready");
    servers.push_back(
        {"shutdown-shim (" + label + ")", variants.back().port, variants.back().process->pid()});
  }
  for (const auto& s : servers) report.servers.push_back(s.name);
  for (const bool new_connections : {false, true}) {
    const std::string mode = new_connections ? "new connection per request" : "keep-alive";
    for (int round = 0; round < o.wrk_rounds; ++round) {
      // Interleaved, so that a slow spell on the shared machine hits every server alike.
      for (const auto& s : servers) {
        auto r = run_wrk(o, s, new_connections,
                         dir / fmt::format("wrk-{}-{}-{}.log", s.port, new_connections, round));
        std::cerr << fmt::format("  wrk {} {} round {}: {:.0f} req/s, p99 {:.3f} ms\n", s.name,
                                 mode, round + 1, r.requests_per_s, r.p99_ms);
        report.results[mode][s.name].push_back(r);
      }
    }
  }
  report.shim_hwm_after_kb = proc_status_kb(shim.process->pid())["VmHWM"];
  for (auto& v : variants) v.process->kill_and_reap();
  shim.process->kill_and_reap();
  polling.process->kill_and_reap();
  nginx.stop();
  haproxy.stop();
  return report;
}

}  // namespace bench
