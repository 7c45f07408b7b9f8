#include "e2e_common.hpp"

#include <fmt/core.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "test_pki.hpp"

namespace e2e {

std::string seconds(double s) { return fmt::format("{}ms", std::llround(s * 1000)); }

double parse_seconds(std::string_view text) {
  double total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    if (start == i) throw std::invalid_argument(fmt::format("bad duration '{}'", text));
    const double n = std::stod(std::string(text.substr(start, i - start)));
    std::size_t u = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const auto unit = text.substr(u, i - u);
    total += n * (unit == "ms" ? 1e-3 : unit == "m" ? 60 : unit == "h" ? 3600 : 1);
  }
  return total;
}

std::optional<std::string> flag(std::string_view arg, std::string_view name) {
  if (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=') {
    return std::string(arg.substr(name.size() + 1));
  }
  return std::nullopt;
}

bool parse_common_flag(std::string_view a, common_settings& s) {
  if (auto v = flag(a, "--drain")) {
    s.drain_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--exit-timeout")) {
    s.exit_timeout_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--inter")) {
    parse_seconds(*v);
    s.inter = *v;
  } else if (auto v = flag(a, "--fall")) {
    s.fall = static_cast<unsigned>(std::stoul(*v));
  } else if (auto v = flag(a, "--rise")) {
    s.rise = static_cast<unsigned>(std::stoul(*v));
  } else if (auto v = flag(a, "--rate")) {
    s.rate = std::stod(*v);
  } else if (auto v = flag(a, "--request-time")) {
    s.request_time_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--lead")) {
    s.lead_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--tail")) {
    s.tail_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--request-timeout")) {
    s.request_timeout_s = parse_seconds(*v);
  } else if (auto v = flag(a, "--out-dir")) {
    s.out_dir = *v;
  } else if (auto v = flag(a, "--haproxy")) {
    s.haproxy = *v;
  } else if (a == "--check") {
    s.check = true;
  } else if (auto v = flag(a, "--server")) {
    if (*v != "stand-in" && *v != "real")
      throw std::invalid_argument("--server is stand-in or real");
    s.real_server = *v == "real";
  } else if (auto v = flag(a, "--realapi-dir")) {
    s.realapi_dir = *v;
  } else {
    return false;
  }
  return true;
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::milliseconds step) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
  return true;
}

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::microseconds(std::llround(s * 1e6)));
}

std::optional<pid_t> read_pid(const std::filesystem::path& pidfile) {
  const std::string text = sandbox::read_text_file(pidfile);
  if (text.empty()) return std::nullopt;
  return static_cast<pid_t>(std::stol(text));
}

std::filesystem::path read_first_line(const std::filesystem::path& path) {
  std::string text = sandbox::read_text_file(path);
  return text.substr(0, text.find('\n'));
}

bool ready_200(std::uint16_t port) {
  sandbox::http_client c(port);
  auto r = c.get("/readyz", std::chrono::milliseconds(500));
  return r.ok && r.status == 200;
}

std::optional<double> shim_metric(std::uint16_t port, const std::string& name) {
  sandbox::http_client c(port);
  const auto r = c.get("/metrics", std::chrono::milliseconds(2000));
  if (!r.ok || r.status != 200) return std::nullopt;
  return sandbox::metric_value(r.body, name);
}

std::optional<std::string> shim_check_line(std::uint16_t port, const std::string& check) {
  sandbox::http_client c(port);
  const auto r = c.get("/readyz?verbose", std::chrono::milliseconds(2000));
  if (!r.ok) return std::nullopt;
  return sandbox::readyz_check_line(r.body, check);
}

std::uint16_t next_service_port() {
  static std::uint16_t next = 20000;
  return next++;
}

namespace {

// Brings up the loopback of the fresh network namespace.
void loopback_up() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int r = ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (r == 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    r = ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  const int err = errno;
  close(fd);
  if (r < 0) throw std::system_error(err, std::generic_category(), "bringing up lo");
}

}  // namespace

bool enter_private_network() {
  if (unshare(CLONE_NEWNET) != 0) {
    fmt::print(stderr, "e2e: cannot make a private network namespace: {}\n", std::strerror(errno));
    return false;
  }
  loopback_up();
  return true;
}

std::optional<std::string> missing_tool(const std::string& haproxy) {
  const auto tools = sandbox::tool_paths::from_environment();
  if (geteuid() != 0) return "must run as root (logind, mount and network namespaces)";
  if (access(haproxy.c_str(), X_OK) != 0) return "haproxy not found at " + haproxy;
  if (access(tools.logind.c_str(), X_OK) != 0) return "systemd-logind not found at " + tools.logind;
  if (access(tools.dbus_daemon.c_str(), X_OK) != 0) return "dbus-daemon not found";
  return std::nullopt;
}

int cannot_run(const std::string& why) {
  const char* ci = std::getenv("CI");
  if (ci && std::string_view(ci) == "true") {
    fmt::print(stderr, "e2e cannot run, and CI=true makes that a failure: {}\n", why);
    return 1;
  }
  fmt::print(stderr, "e2e skipped: {}\n", why);
  return 77;
}

void stop_node_process(sandbox::child_process& process, const std::filesystem::path& dir_file) {
  process.stop(std::chrono::milliseconds(5000));
  const std::filesystem::path dir = read_first_line(dir_file);
  if (dir.empty()) return;
  std::error_code e;
  std::filesystem::remove_all(dir, e);
  sandbox::unregister_cleanup_dir(dir);
}

api_server make_api_server(const common_settings& s, const std::string& fake_apiserver,
                           const std::filesystem::path& pki_dir) {
  api_server server;
  server.real = s.real_server;
  server.binary = s.real_server ? (s.realapi_dir / "realapi").string() : fake_apiserver;
  if (!pki_dir.empty()) {
    std::filesystem::create_directories(pki_dir);
    const auto pki = sandbox::test_pki::make(pki_dir);
    server.cert = pki.server.cert;
    server.key = pki.server.key;
    server.ca = pki.ca;
  }
  return server;
}

std::vector<std::string> server_flags(const api_server& server) {
  std::vector<std::string> f = {"--api-binary=" + server.binary};
  if (server.real) f.emplace_back("--api-real");
  if (server.tls()) {
    f.push_back("--api-cert=" + server.cert.string());
    f.push_back("--api-key=" + server.key.string());
    f.push_back("--api-ca=" + server.ca.string());
  }
  return f;
}

bool parse_server_flag(std::string_view arg, api_server& server) {
  if (auto v = flag(arg, "--api-binary")) {
    server.binary = *v;
  } else if (arg == "--api-real") {
    server.real = true;
  } else if (auto v = flag(arg, "--api-cert")) {
    server.cert = *v;
  } else if (auto v = flag(arg, "--api-key")) {
    server.key = *v;
  } else if (auto v = flag(arg, "--api-ca")) {
    server.ca = *v;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> apiserver_argv(const api_server& server, const std::string& name,
                                        std::uint16_t port, const std::filesystem::path& dir,
                                        double shutdown_delay_s, double request_time_s) {
  std::vector<std::string> argv = {server.binary,
                                   fmt::format("--listen=127.0.0.1:{}", port),
                                   "--pidfile=" + (dir / (name + ".pid")).string(),
                                   "--signal-log=" + (dir / (name + "-signals.log")).string(),
                                   "--lifecycle-log=" + (dir / (name + "-lifecycle.log")).string(),
                                   "--shutdown-delay-duration=" + seconds(shutdown_delay_s),
                                   "--name=" + name};
  if (server.real) {
    argv.push_back("--token=" + server.token());
  } else {
    argv.push_back("--request-time=" + seconds(request_time_s));
  }
  if (server.tls()) {
    argv.push_back("--tls-cert-file=" + server.cert.string());
    argv.push_back("--tls-private-key-file=" + server.key.string());
  }
  return argv;
}

std::string api_scheme(const api_server& server) { return server.tls() ? "https" : "http"; }

void set_client_auth(const api_server& server, load_options& options) {
  options.tls = server.tls();
  options.bearer_token = server.token();
}

bool answered_by(const api_server& server, std::uint16_t fe_port,
                 const std::vector<std::string>& nodes, std::chrono::milliseconds timeout) {
  // Its new connections: round robin puts each on the next node.
  load_options o{.port = fe_port, .rate = 20, .keep_alive_connections = 1};
  set_client_auth(server, o);
  load_client probe(o);
  const auto all = [&] {
    std::set<std::string> seen;
    for (const auto& r : probe.records()) {
      if (!r.failed()) seen.insert(r.backend);
    }
    return std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) { return seen.count(n); });
  };
  const bool ok = wait_until(all, timeout, std::chrono::milliseconds(20));
  probe.stop();
  return ok;
}

std::vector<std::string> shim_argv(const std::string& shim, std::uint16_t port, double drain_s,
                                   double exit_timeout_s, const std::filesystem::path& event_log,
                                   const std::filesystem::path& state_dir) {
  return {shim,
          fmt::format("--listen=127.0.0.1:{}", port),
          "--drain-delay=" + seconds(drain_s),
          "--exit-timeout=" + seconds(exit_timeout_s),
          "--inhibit=required",
          "--event-log=" + event_log.string(),
          "--state-dir=" + state_dir.string(),
          "--log-format=json"};
}

}  // namespace e2e
