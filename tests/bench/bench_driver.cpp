// bench_driver: the measurements behind scripts/bench, printed as one markdown report.
//
// Everything runs on a sandboxed node (tests/sandbox: private dbus-daemon, the real systemd-logind,
// the stand-in PID 1 manager); nothing talks to the machine's own system bus. All times are
// CLOCK_MONOTONIC, which the harness, the stand-ins and the shim's event log share. The figures
// are distributions and ratios of one run; nothing here decides pass or fail except the plain
// comparison with the project's targets, which is reported, not enforced.

#include <fcntl.h>
#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/version.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "private_bus.hpp"
#include "process.hpp"
#include "test_pki.hpp"

extern char** environ;

namespace bench {

using namespace std::chrono_literals;
using sandbox::monotonic_us;

// --- options ------------------------------------------------------------------------------------

struct options {
  int reboots = 20;  // per hold scenario; the unready latency pools both scenarios
  int sigterms = 20;
  int starts = 10;
  int idle_seconds = 10;
  std::string drain = "500ms";
  int wrk_seconds = 10;
  int wrk_connections = 50;
  int wrk_threads = 1;
  int wrk_rounds = 3;
  int crashes = 20;  // of the apiserver, each to the first 503
  int hangs = 5;     // of the apiserver, each to the first 503
  std::set<std::string> sections{"reboot", "sigterm", "startup", "idle", "http", "upstream"};
  std::string build_info = "unknown";
  // Other shim binaries for the /readyz section, interleaved with the rest: "LABEL=PATH".
  std::vector<std::pair<std::string, std::string>> shim_variants;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "bench_driver: " << why << "\n"
            << "usage: bench_driver [--reboots=N] [--sigterms=N] [--starts=N] [--idle-seconds=N]\n"
            << "  [--drain=DURATION] [--wrk-duration=SECONDS] [--wrk-connections=N]\n"
            << "  [--wrk-threads=N] [--wrk-rounds=N] [--crashes=N] [--hangs=N]\n"
            << "  [--sections=reboot,sigterm,startup,idle,http,upstream]\n"
            << "  [--build-info=TEXT] [--shim-variant=LABEL=PATH ...]\n";
  std::exit(2);
}

options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) usage("unknown argument " + arg);
    const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    auto number = [&] {
      try {
        const int v = std::stoi(value);
        if (v < 1) throw std::out_of_range("not positive");
        return v;
      } catch (const std::exception&) {
        usage(key + " needs a positive number");
      }
    };
    if (key == "--reboots") {
      o.reboots = number();
    } else if (key == "--sigterms") {
      o.sigterms = number();
    } else if (key == "--starts") {
      o.starts = number();
    } else if (key == "--idle-seconds") {
      o.idle_seconds = number();
    } else if (key == "--drain") {
      o.drain = value;
    } else if (key == "--wrk-duration") {
      o.wrk_seconds = number();
    } else if (key == "--wrk-connections") {
      o.wrk_connections = number();
    } else if (key == "--wrk-threads") {
      o.wrk_threads = number();
    } else if (key == "--wrk-rounds") {
      o.wrk_rounds = number();
    } else if (key == "--crashes") {
      o.crashes = number();
    } else if (key == "--hangs") {
      o.hangs = number();
    } else if (key == "--build-info") {
      o.build_info = value;
    } else if (key == "--shim-variant") {
      const auto sep = value.find('=');
      if (sep == std::string::npos || sep == 0) usage("--shim-variant needs LABEL=PATH");
      o.shim_variants.emplace_back(value.substr(0, sep), value.substr(sep + 1));
    } else if (key == "--sections") {
      o.sections.clear();
      std::stringstream in(value);
      for (std::string s; std::getline(in, s, ',');) {
        if (s != "reboot" && s != "sigterm" && s != "startup" && s != "idle" && s != "http" &&
            s != "upstream") {
          usage("unknown section " + s);
        }
        o.sections.insert(s);
      }
    } else {
      usage("unknown argument " + arg);
    }
  }
  return o;
}

// Milliseconds in a Go-ish duration as this driver writes them: "500ms", "2s".
std::uint64_t duration_us(const std::string& text) {
  std::size_t pos = 0;
  const double v = std::stod(text, &pos);
  const std::string unit = text.substr(pos);
  if (unit == "ms") return static_cast<std::uint64_t>(v * 1000);
  if (unit == "s") return static_cast<std::uint64_t>(v * 1'000'000);
  usage("--drain takes ms or s, e.g. 500ms");
}

// --- statistics ---------------------------------------------------------------------------------

// Nearest-rank percentile: with n < 100 samples p99 is the largest but one at most.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

double median(const std::vector<double>& v) { return percentile(v, 50); }

std::string ms(double v) { return std::isnan(v) ? "n/a" : fmt::format("{:.2f} ms", v); }

double us_to_ms(std::int64_t us) { return static_cast<double>(us) / 1000.0; }

std::int64_t diff_us(std::uint64_t from, std::uint64_t to) {
  return static_cast<std::int64_t>(to) - static_cast<std::int64_t>(from);
}

struct distribution_row {
  std::string what;
  std::vector<double> ms_values;
  std::string target;  // empty: no target
  std::function<bool(double p50, double p99, double max)> met;
};

void print_distribution_table(const std::vector<distribution_row>& rows) {
  std::cout << "| what | n | min | p50 | p99 | max | target |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : rows) {
    const double p50 = percentile(r.ms_values, 50), p99 = percentile(r.ms_values, 99),
                 mx = percentile(r.ms_values, 100);
    std::string target = r.target.empty() ? "" : r.target;
    if (r.met && !r.ms_values.empty()) target += r.met(p50, p99, mx) ? ": **met**" : ": **missed**";
    std::cout << fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", r.what, r.ms_values.size(),
                             ms(percentile(r.ms_values, 0)), ms(p50), ms(p99), ms(mx), target);
  }
  std::cout << "\n";
}

// --- small system helpers -----------------------------------------------------------------------

std::string run_and_read(const std::string& command) {
  std::string out;
  if (FILE* f = popen(command.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::map<std::string, std::uint64_t> proc_status_kb(pid_t pid) {
  std::map<std::string, std::uint64_t> values;
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream rest(line.substr(colon + 1));
    std::uint64_t v = 0;
    if (rest >> v) values[line.substr(0, colon)] = v;
  }
  return values;
}

// /proc/PID/smaps_rollup's totals, in kB, by field name without the colon.
std::map<std::string, std::uint64_t> smaps_rollup_kb(pid_t pid) {
  std::map<std::string, std::uint64_t> values;
  std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string key;
    std::uint64_t kb = 0;
    if (f >> key >> kb && key.ends_with(':')) values[key.substr(0, key.size() - 1)] = kb;
  }
  return values;
}

// Context switches of every thread of pid, and its thread count.
struct wakeups {
  std::uint64_t voluntary = 0, involuntary = 0;
  std::size_t threads = 0;
};

wakeups count_wakeups(pid_t pid) {
  wakeups w;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    auto v = proc_status_kb(std::stoi(task.path().filename().string()));
    w.voluntary += v["voluntary_ctxt_switches"];
    w.involuntary += v["nonvoluntary_ctxt_switches"];
    ++w.threads;
  }
  return w;
}

// utime + stime of pid, in clock ticks.
std::uint64_t cpu_ticks(pid_t pid) {
  const std::string stat = sandbox::read_text_file(fmt::format("/proc/{}/stat", pid));
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

// Resident memory of pid grouped by what is mapped (a library, [heap], [stack], anonymous).
struct mapping_use {
  std::string name;
  std::uint64_t rss_kb = 0, private_kb = 0, shared_kb = 0;
};

std::vector<mapping_use> rss_by_mapping(pid_t pid) {
  std::map<std::string, mapping_use> groups;
  std::ifstream in(fmt::format("/proc/{}/smaps", pid));
  std::string current;
  const std::regex header(R"(^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, header)) {
      current = m[1].str().empty() ? "[anonymous]" : m[1].str();
      if (current.find('/') != std::string::npos) {
        current = std::filesystem::path(current).filename().string();
      }
      groups[current].name = current;
      continue;
    }
    std::istringstream f(line);
    std::string key;
    std::uint64_t kb = 0;
    if (!(f >> key >> kb)) continue;
    auto& g = groups[current];
    if (key == "Rss:") g.rss_kb += kb;
    if (key == "Private_Clean:" || key == "Private_Dirty:") g.private_kb += kb;
    if (key == "Shared_Clean:" || key == "Shared_Dirty:") g.shared_kb += kb;
  }
  std::vector<mapping_use> result;
  for (auto& [name, g] : groups) {
    if (g.rss_kb > 0) result.push_back(g);
  }
  std::sort(result.begin(), result.end(),
            [](const mapping_use& a, const mapping_use& b) { return a.rss_kb > b.rss_kb; });
  return result;
}

std::string mib(std::uint64_t kb) {
  return fmt::format("{:.2f} MiB", static_cast<double>(kb) / 1024);
}

// --- observers ----------------------------------------------------------------------------------

// The observers below are measuring instruments that sleep until their event arrives. On a busy
// machine an ordinary thread can wait milliseconds for a CPU after its wake-up, which would move
// its timestamps; real-time priority makes it run at once. Returns false if that is not allowed.
bool make_this_thread_realtime() {
  sched_param param{};
  param.sched_priority = 50;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &param) == 0;
}

std::atomic<bool> observers_realtime{true};

// An independent connection to the sandbox bus, in its own thread, that timestamps logind's
// PrepareForShutdown as soon as it is read from the socket: the thread sleeps in sd_bus_wait, so
// the timestamp is taken within a wake-up of the message's arrival, the same moment the shim's own
// connection receives its copy from dbus-daemon.
class prepare_for_shutdown_observer {
 public:
  explicit prepare_for_shutdown_observer(std::string address) : address_(std::move(address)) {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { run(ready); });
    started.get();
  }
  ~prepare_for_shutdown_observer() {
    stop_ = true;
    thread_.join();
  }

  // First PrepareForShutdown(start) received at or after since_us.
  std::optional<std::uint64_t> seen(bool start, std::uint64_t since_us) {
    std::lock_guard lock(mutex_);
    for (auto& [s, at] : seen_) {
      if (s == start && at >= since_us) return at;
    }
    return std::nullopt;
  }

 private:
  void run(std::promise<void>& ready) {
    if (!make_this_thread_realtime()) observers_realtime = false;
    try {
      sandbox::private_bus bus(address_);
      auto slot = bus.add_match(
          "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
          "PrepareForShutdown",
          [](sd_bus_message* m, void* self, sd_bus_error*) -> int {
            const auto at = monotonic_us();
            int start = 0;
            if (sd_bus_message_read(m, "b", &start) >= 0) {
              auto* o = static_cast<prepare_for_shutdown_observer*>(self);
              std::lock_guard lock(o->mutex_);
              o->seen_.emplace_back(start != 0, at);
            }
            return 0;
          },
          this);
      ready.set_value();
      while (!stop_) {
        while (sd_bus_process(bus.get(), nullptr) > 0) {
        }
        sd_bus_wait(bus.get(), 100'000);
      }
    } catch (...) {
      ready.set_exception(std::current_exception());
    }
  }

  std::string address_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::pair<bool, std::uint64_t>> seen_;
  std::thread thread_;
};

// A NOTIFY_SOCKET for the shim: a datagram socket read by its own thread, which timestamps each
// READY=1 on receipt.
class notify_listener {
 public:
  explicit notify_listener(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    std::filesystem::remove(path_);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) {
      throw std::runtime_error("cannot bind the notify socket " + path_.string());
    }
    timeval tv{0, 100'000};  // lets the thread notice stop_
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread_ = std::thread([this] {
      if (!make_this_thread_realtime()) observers_realtime = false;
      char buf[4096];
      while (!stop_) {
        const ssize_t n = recv(fd_, buf, sizeof buf, 0);
        if (n <= 0) continue;
        const auto at = monotonic_us();
        if (std::string_view(buf, static_cast<std::size_t>(n)).find("READY=1") !=
            std::string_view::npos) {
          std::lock_guard lock(mutex_);
          ready_.push_back(at);
        }
      }
    });
  }
  ~notify_listener() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  std::string env() const { return "NOTIFY_SOCKET=" + path_.string(); }
  std::optional<std::uint64_t> ready_since(std::uint64_t since_us) {
    std::lock_guard lock(mutex_);
    for (auto at : ready_) {
      if (at >= since_us) return at;
    }
    return std::nullopt;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::uint64_t> ready_;
  std::thread thread_;
};

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::microseconds step = 1ms) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(step);
  }
  return true;
}

bool wait_http_200(std::uint16_t port, std::chrono::milliseconds timeout,
                   const std::string& target = "/readyz") {
  sandbox::http_client client(port);
  return wait_until(
      [&] {
        auto r = client.get(target, 1000ms);
        return r.ok && r.status == 200;
      },
      timeout, 10ms);
}

// --- the shim and the stand-in apiserver on a sandboxed node ------------------------------------

struct running_shim {
  sandbox::child_process* process = nullptr;
  std::uint16_t port = 0;
  std::filesystem::path event_log;

  std::optional<std::uint64_t> event_at(const std::string& name, std::uint64_t since_us) const {
    for (const auto& e : sandbox::read_event_log(event_log)) {
      if (e.event == name && e.monotonic_us >= since_us) return e.monotonic_us;
    }
    return std::nullopt;
  }
};

// `binary`: the shim under test (SHUTDOWN_SHIM) unless given.
running_shim spawn_shim(sandbox::node_sandbox& sb, const std::string& name,
                        const std::vector<std::string>& flags,
                        const std::vector<std::string>& env = {}, std::string binary = {}) {
  running_shim s;
  s.port = sandbox::pick_free_port();
  s.event_log = sb.path(name + "-events.jsonl");
  if (binary.empty()) binary = sb.tools().shim;
  std::vector<std::string> argv{binary, fmt::format("--listen=127.0.0.1:{}", s.port),
                                "--event-log=" + s.event_log.string(), "--log-format=json"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  s.process = &sb.spawn(name, argv, env);
  return s;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void wait_shim_ready_and_locked(sandbox::node_sandbox& sb, const running_shim& s) {
  require(wait_http_200(s.port, 30s), "the shim did not become ready (/readyz 200)");
  require(sb.wait_for_inhibitor("shutdown-shim", true, 30s), "the shim did not take its lock");
}

// A tight /readyz prober (no pause between requests, one keep-alive connection) that knows its own
// request rate, i.e. the resolution of "first 503 seen".
struct timed_prober {
  std::uint64_t started_us = monotonic_us();
  sandbox::http_prober prober;
  std::uint64_t stopped_us = 0;

  explicit timed_prober(std::uint16_t port) : prober(port, "/readyz", 0us, 120s) {
    require(wait_until([&] { return !prober.changes().empty(); }, 10s), "the prober got no answer");
    require(prober.changes().front().status == 200, "/readyz was not 200 before the trigger");
  }
  void stop() {
    prober.stop();
    stopped_us = monotonic_us();
  }
  double interval_us() const {
    return static_cast<double>(stopped_us - started_us) /
           static_cast<double>(std::max<std::uint64_t>(prober.requests(), 1));
  }
};

// --- a stand-in kube-apiserver over HTTPS, for the target and upstream checks ------------------

// The upstream probe as the sections below run it: kubelet's default probe period and timeout,
// HAProxy's default fall and rise.
constexpr std::chrono::milliseconds kProbeInterval{1000};
constexpr std::chrono::milliseconds kProbeTimeout{1000};
constexpr unsigned kProbeFall = 3;
constexpr unsigned kProbeRise = 2;

// fake_apiserver serving /readyz over HTTPS with the test PKI's server certificate (kubeadm's
// names), on a port that stays the same across restarts, with its pidfile for the target check.
class tls_apiserver {
 public:
  explicit tls_apiserver(sandbox::node_sandbox& sb)
      : sb_(sb),
        pki_(make_pki(sb.path("pki"))),
        port_(sandbox::pick_free_port()),
        pidfile_(sb.path("tls-apiserver.pid")) {
    start();
  }

  void start() {
    const auto port_file = sb_.path("tls-apiserver.port");
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
    std::filesystem::remove(pidfile_, ec);
    process_ =
        &sb_.spawn(fmt::format("tls-apiserver-{}", starts_++),
                   {sb_.tools().fake_apiserver, fmt::format("--listen=127.0.0.1:{}", port_),
                    "--port-file=" + port_file.string(), "--pidfile=" + pidfile_.string(),
                    "--tls-cert-file=" + pki_.server.cert.string(),
                    "--tls-private-key-file=" + pki_.server.key.string(), "--name=kube-apiserver"});
    require(wait_until([&] { return !sandbox::read_text_file(port_file).empty(); }, 30s),
            "fake_apiserver did not listen");
  }

  sandbox::child_process& process() { return *process_; }

  // The shim's target check on the pidfile and its upstream check on /readyz, verified.
  std::vector<std::string> shim_flags() const {
    return {fmt::format("--upstream-readyz=https://127.0.0.1:{}/readyz", port_),
            "--upstream-ca-file=" + pki_.ca.string(),
            fmt::format("--upstream-interval={}ms", kProbeInterval.count()),
            fmt::format("--upstream-timeout={}ms", kProbeTimeout.count()),
            fmt::format("--upstream-fall={}", kProbeFall),
            fmt::format("--upstream-rise={}", kProbeRise),
            "--target-pidfile=" + pidfile_.string()};
  }

 private:
  static sandbox::test_pki make_pki(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    return sandbox::test_pki::make(dir);
  }

  sandbox::node_sandbox& sb_;
  sandbox::test_pki pki_;
  std::uint16_t port_;
  std::filesystem::path pidfile_;
  sandbox::child_process* process_ = nullptr;
  int starts_ = 0;
};

// The upstream probes the shim has made so far, from its /metrics.
std::optional<double> upstream_probes(std::uint16_t port) {
  sandbox::http_client client(port);
  const auto r = client.get("/metrics");
  const std::string name = "\nshutdown_shim_upstream_probe_duration_seconds_count ";
  const auto at = r.body.find(name);
  if (!r.ok || at == std::string::npos) return std::nullopt;
  return std::stod(r.body.substr(at + name.size()));
}

// --- unready latency and hold accuracy, through logind ------------------------------------------

struct hold_scenario {
  std::string name;
  std::string apiserver_shutdown_delay;
  std::string later;  // which condition is expected to come last
};

struct reboot_sample {
  std::uint64_t reboot_us = 0, prepare_us = 0, first_503_us = 0, initiated_us = 0;
  std::uint64_t met_us = 0, target_exit_us = 0, target_exited_event_us = 0, released_us = 0;
  std::uint64_t start_unit_us = 0;
  bool drain_was_later = false;
  double probe_interval_us = 0;
};

std::vector<reboot_sample> run_reboots(const options& o, const hold_scenario& sc) {
  sandbox::node_sandbox sb;
  try {
    prepare_for_shutdown_observer observer(sb.bus_address());
    const auto pidfile = sb.path("kube-apiserver.pid");
    const auto port_file = sb.path("kube-apiserver.port");
    const std::uint64_t drain_us = duration_us(o.drain);

    auto start_apiserver = [&](int i) {
      std::error_code ec;
      std::filesystem::remove(pidfile, ec);
      std::filesystem::remove(port_file, ec);
      const auto lifecycle = sb.path(fmt::format("kube-apiserver-{}.lifecycle", i));
      auto& p = sb.spawn(
          fmt::format("kube-apiserver-{}", i),
          {sb.tools().fake_apiserver, "--listen=127.0.0.1:0", "--port-file=" + port_file.string(),
           "--pidfile=" + pidfile.string(), "--lifecycle-log=" + lifecycle.string(),
           "--shutdown-delay=" + sc.apiserver_shutdown_delay, "--name=kube-apiserver"});
      require(wait_until([&] { return !sandbox::read_text_file(port_file).empty(); }, 30s),
              "fake_apiserver did not listen");
      return std::make_pair(&p, lifecycle);
    };

    auto api = start_apiserver(0);
    auto shim = spawn_shim(
        sb, "shutdown-shim",
        {"--drain-delay=" + o.drain, "--exit-timeout=5s", "--target-pidfile=" + pidfile.string()});
    std::vector<reboot_sample> samples;
    for (int i = 0; i < o.reboots; ++i) {
      if (i > 0) api = start_apiserver(i);
      wait_shim_ready_and_locked(sb, shim);
      reboot_sample r;
      timed_prober probe(shim.port);
      r.reboot_us = sb.reboot();
      require(wait_until(
                  [&] {
                    return observer.seen(true, r.reboot_us) &&
                           probe.prober.first_status_at(503, r.reboot_us);
                  },
                  10s),
              "no PrepareForShutdown(true) or no 503 after Reboot()");
      probe.stop();
      r.prepare_us = *observer.seen(true, r.reboot_us);
      r.first_503_us = *probe.prober.first_status_at(503, r.reboot_us);
      r.probe_interval_us = probe.interval_us();
      auto start = sb.wait_for_start_unit("reboot.target", 30s, r.reboot_us);
      require(start.has_value(), "logind never started reboot.target");
      r.start_unit_us = start->usec;
      require(api.first->wait_for_exit(30s).has_value(), "the apiserver did not exit");
      require(wait_until(
                  [&] { return shim.event_at("InhibitorReleased", r.reboot_us).has_value(); }, 10s),
              "no InhibitorReleased event");
      r.initiated_us = shim.event_at("ShutdownInitiated", r.reboot_us).value_or(0);
      r.released_us = *shim.event_at("InhibitorReleased", r.reboot_us);
      r.target_exited_event_us = shim.event_at("TargetExited", r.reboot_us).value_or(0);
      for (const auto& l : sandbox::read_timed_lines(api.second)) {
        if (l.word == "EXIT") r.target_exit_us = l.usec;
      }
      require(r.initiated_us && r.target_exit_us, "ShutdownInitiated or the target's EXIT missing");
      r.drain_was_later = r.initiated_us + drain_us >= r.target_exit_us;
      r.met_us = std::max(r.initiated_us + drain_us, r.target_exit_us);
      samples.push_back(r);
      std::cerr << fmt::format(
          "  {} reboot {}/{}: PrepareForShutdown->503 {:.2f} ms, release-met {:.2f} ms, "
          "StartUnit-met {:.2f} ms\n",
          sc.name, i + 1, o.reboots, us_to_ms(diff_us(r.prepare_us, r.first_503_us)),
          us_to_ms(diff_us(r.met_us, r.released_us)), us_to_ms(diff_us(r.met_us, r.start_unit_us)));

      // Cancel the reboot job: logind says PrepareForShutdown(false), the shim takes its lock
      // again and is ready once a target runs again.
      const auto before = sb.prepare_for_shutdown_signals().size();
      sb.cancel_last_job();
      require(sb.wait_for_prepare_for_shutdown(false, 30s, before),
              "no PrepareForShutdown(false) after the cancel");
    }
    return samples;
  } catch (...) {
    sb.dump_logs(std::cerr, 40);
    throw;
  }
}

// --- unready latency through SIGTERM ------------------------------------------------------------

struct sigterm_sample {
  std::uint64_t kill_us = 0, first_503_us = 0, initiated_us = 0;
  double probe_interval_us = 0;
};

std::vector<sigterm_sample> run_sigterms(const options& o) {
  sandbox::node_sandbox sb;
  try {
    // PID 1 is stopping: the shim's own SIGTERM is a real shutdown (attach mode), as when systemd
    // stops the unit during `systemctl reboot --force`.
    sb.set_system_state("stopping");
    std::vector<sigterm_sample> samples;
    for (int i = 0; i < o.sigterms; ++i) {
      auto shim = spawn_shim(sb, fmt::format("shutdown-shim-{}", i),
                             {"--drain-delay=200ms", "--exit-timeout=0s"});
      wait_shim_ready_and_locked(sb, shim);
      sigterm_sample r;
      timed_prober probe(shim.port);
      r.kill_us = monotonic_us();
      shim.process->signal(SIGTERM);
      require(
          wait_until([&] { return probe.prober.first_status_at(503, r.kill_us).has_value(); }, 10s),
          "no 503 after SIGTERM");
      probe.stop();
      r.first_503_us = *probe.prober.first_status_at(503, r.kill_us);
      r.probe_interval_us = probe.interval_us();
      require(shim.process->wait_for_exit(30s).has_value(), "the shim did not exit after SIGTERM");
      r.initiated_us = shim.event_at("ShutdownInitiated", r.kill_us).value_or(0);
      require(sb.wait_for_inhibitor("shutdown-shim", false, 30s), "the lock outlived the shim");
      samples.push_back(r);
      std::cerr << fmt::format("  SIGTERM {}/{}: kill->503 {:.2f} ms\n", i + 1, o.sigterms,
                               us_to_ms(diff_us(r.kill_us, r.first_503_us)));
    }
    return samples;
  } catch (...) {
    sb.dump_logs(std::cerr, 40);
    throw;
  }
}

// --- start-up, idle ------------------------------------------------------------------------------

struct startup_sample {
  double ready_notify_ms = NAN, first_200_ms = NAN;
};

// Spawn (just before fork) to READY=1 on our NOTIFY_SOCKET and to the first 200 on /readyz. The
// HTTP side retries every 200 us, so it is late by up to that plus one request.
std::vector<startup_sample> run_startups(sandbox::node_sandbox& sb, const options& o,
                                         bool with_lock) {
  notify_listener notify(sb.path(with_lock ? "notify-lock.sock" : "notify-off.sock"));
  std::vector<startup_sample> samples;
  for (int i = 0; i < o.starts; ++i) {
    const auto t0 = monotonic_us();
    auto shim = spawn_shim(sb, fmt::format("startup-{}-{}", with_lock ? "lock" : "off", i),
                           {"--drain-delay=1s", with_lock ? "--inhibit=required" : "--inhibit=off"},
                           {notify.env()});
    sandbox::http_client client(shim.port);
    startup_sample s;
    require(wait_until(
                [&] {
                  auto r = client.get("/readyz", 1000ms);
                  if (r.ok && r.status == 200) s.first_200_ms = us_to_ms(diff_us(t0, r.at_us));
                  return r.ok && r.status == 200;
                },
                30s, 200us),
            "the shim never answered 200");
    require(wait_until([&] { return notify.ready_since(t0).has_value(); }, 10s), "no READY=1");
    s.ready_notify_ms = us_to_ms(diff_us(t0, *notify.ready_since(t0)));
    samples.push_back(s);
    std::cerr << fmt::format("  start {}/{} ({}): READY=1 {:.2f} ms, first 200 {:.2f} ms\n", i + 1,
                             o.starts, with_lock ? "lock" : "--inhibit=off", s.ready_notify_ms,
                             s.first_200_ms);
    client.disconnect();
    shim.process->kill_and_reap();
    if (with_lock) {
      require(sb.wait_for_inhibitor("shutdown-shim", false, 30s), "the lock outlived the shim");
    }
  }
  return samples;
}

struct idle_window {
  std::uint64_t voluntary = 0, involuntary = 0, cpu_ticks = 0;
};

struct idle_sample {
  std::string mode;
  // Two consecutive windows: the first starts half a second after the harness's last request,
  // the second when the first ends (past the shim's 10 s HTTP read deadline).
  idle_window first, second;
  std::size_t threads = 0;
  std::uint64_t hwm_kb = 0, rss_kb = 0, anon_kb = 0, file_kb = 0;
  std::uint64_t pss_kb = 0, private_kb = 0;  // from smaps_rollup; private = USS
  std::vector<mapping_use> mappings;
  // With the upstream check on: the probes made over both windows (from the metrics read just
  // before the first window and just after the second).
  std::optional<double> probes;
};

// The shims idle side by side: one with --inhibit=off, one holding the lock against logind, and
// one with --inhibit=off whose upstream check probes an HTTPS apiserver (OpenSSL loaded).
std::vector<idle_sample> run_idle(sandbox::node_sandbox& sb, const options& o) {
  tls_apiserver api(sb);
  auto off = spawn_shim(sb, "idle-off", {"--inhibit=off"});
  auto lock = spawn_shim(sb, "idle-lock", {"--inhibit=required"});
  auto polling_flags = api.shim_flags();
  polling_flags.push_back("--inhibit=off");
  auto polling = spawn_shim(sb, "idle-upstream", polling_flags);
  require(wait_http_200(off.port, 30s), "the --inhibit=off shim did not become ready");
  require(wait_http_200(polling.port, 30s), "the shim with the upstream check did not get ready");
  wait_shim_ready_and_locked(sb, lock);
  const auto probes_before = upstream_probes(polling.port);
  std::this_thread::sleep_for(500ms);
  const std::string polling_mode =
      fmt::format("--inhibit=off, upstream check on (HTTPS every {} ms)", kProbeInterval.count());
  std::vector<std::pair<std::string, running_shim*>> shims{
      {"--inhibit=off", &off}, {"lock held against logind", &lock}, {polling_mode, &polling}};
  struct snapshot {
    wakeups w;
    std::uint64_t ticks;
  };
  auto take = [&] {
    std::vector<snapshot> v;
    for (auto& [mode, s] : shims) {
      v.push_back({count_wakeups(s->process->pid()), cpu_ticks(s->process->pid())});
    }
    return v;
  };
  auto window = [](const snapshot& a, const snapshot& b) {
    return idle_window{b.w.voluntary - a.w.voluntary, b.w.involuntary - a.w.involuntary,
                       b.ticks - a.ticks};
  };
  const auto t0 = take();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const auto t1 = take();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const auto t2 = take();
  std::vector<idle_sample> samples;
  for (std::size_t i = 0; i < shims.size(); ++i) {
    const pid_t pid = shims[i].second->process->pid();
    auto status = proc_status_kb(pid);
    idle_sample s;
    s.mode = shims[i].first;
    s.first = window(t0[i], t1[i]);
    s.second = window(t1[i], t2[i]);
    s.threads = t2[i].w.threads;
    s.hwm_kb = status["VmHWM"];
    s.rss_kb = status["VmRSS"];
    s.anon_kb = status["RssAnon"];
    s.file_kb = status["RssFile"];
    s.mappings = rss_by_mapping(pid);
    auto rollup = smaps_rollup_kb(pid);
    s.pss_kb = rollup["Pss"];
    s.private_kb = rollup["Private_Clean"] + rollup["Private_Dirty"];
    samples.push_back(std::move(s));
  }
  const auto probes_after = upstream_probes(polling.port);
  require(probes_before && probes_after, "no upstream probe count in /metrics");
  samples.back().probes = *probes_after - *probes_before;
  off.process->kill_and_reap();
  lock.process->kill_and_reap();
  polling.process->kill_and_reap();
  return samples;
}

// --- HTTP under load: the shim, nginx, HAProxy --------------------------------------------------

struct wrk_result {
  double requests_per_s = NAN, p50_ms = NAN, p99_ms = NAN;
  std::uint64_t socket_errors = 0, non_2xx = 0;
  std::uint64_t requests = 0;
  double server_cpu = NAN;  // share of one core used by the server's processes during the run
  // The server's CPU time per request: the figure that depends least on what else the shared
  // machine is doing.
  double cpu_us_per_request = NAN;
};

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

constexpr const char* kPollingServer = "shutdown-shim, upstream check on";

struct http_report {
  // mode ("keep-alive" / "new connections") -> server -> one result per round
  std::map<std::string, std::map<std::string, std::vector<wrk_result>>> results;
  std::vector<std::string> servers;
  std::uint64_t shim_hwm_before_kb = 0, shim_hwm_after_kb = 0;
};

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

// --- the target and upstream checks: crash and hang to the first 503 ----------------------------

struct upstream_report {
  std::vector<double> crash_ms;  // SIGKILL of the apiserver -> first 503 (the target check)
  std::vector<double> hang_ms;   // SIGSTOP of the apiserver -> first 503 (the upstream check)
  std::vector<double> crash_probe_interval_us;
};

upstream_report run_upstream(sandbox::node_sandbox& sb, const options& o) {
  upstream_report r;
  tls_apiserver api(sb);
  auto flags = api.shim_flags();
  flags.push_back("--inhibit=off");
  auto shim = spawn_shim(sb, "upstream-shim", flags);
  for (int i = 0; i < o.crashes; ++i) {
    require(wait_http_200(shim.port, 30s), "the shim did not get ready with its apiserver up");
    timed_prober probe(shim.port);
    const auto kill_us = monotonic_us();
    api.process().signal(SIGKILL);
    require(wait_until([&] { return probe.prober.first_status_at(503, kill_us).has_value(); }, 10s),
            "no 503 after the apiserver's SIGKILL");
    probe.stop();
    r.crash_ms.push_back(us_to_ms(diff_us(kill_us, *probe.prober.first_status_at(503, kill_us))));
    r.crash_probe_interval_us.push_back(probe.interval_us());
    require(api.process().wait_for_exit(10s).has_value(), "the killed apiserver was not reaped");
    std::cerr << fmt::format("  crash {}/{}: SIGKILL->503 {:.2f} ms\n", i + 1, o.crashes,
                             r.crash_ms.back());
    api.start();
  }
  const auto window = kProbeFall * (kProbeInterval + kProbeTimeout);
  for (int i = 0; i < o.hangs; ++i) {
    require(wait_http_200(shim.port, 30s), "the shim did not get ready with its apiserver up");
    // One probe a millisecond: the hang takes seconds to detect, a tight loop would only load
    // the machine the shim's probe timing runs on.
    sandbox::http_prober prober(shim.port, "/readyz", 1000us, 120s);
    require(wait_until([&] { return !prober.changes().empty(); }, 10s), "the prober got no answer");
    const auto stop_us = monotonic_us();
    api.process().signal(SIGSTOP);
    const bool unready =
        wait_until([&] { return prober.first_status_at(503, stop_us).has_value(); }, 3 * window);
    prober.stop();
    api.process().signal(SIGCONT);
    require(unready, "no 503 while the apiserver hung");
    r.hang_ms.push_back(us_to_ms(diff_us(stop_us, *prober.first_status_at(503, stop_us))));
    std::cerr << fmt::format("  hang {}/{}: SIGSTOP->503 {:.0f} ms\n", i + 1, o.hangs,
                             r.hang_ms.back());
  }
  shim.process->kill_and_reap();
  api.process().kill_and_reap();
  return r;
}

// --- the report ---------------------------------------------------------------------------------

std::string dpkg_version(const std::string& package) {
  return run_and_read("dpkg-query -W -f '${Version}' " + package + " 2>/dev/null");
}

std::string load_average() {
  std::string text = sandbox::read_text_file("/proc/loadavg");
  return text.substr(0, text.find(' ', text.find(' ', text.find(' ') + 1) + 1));
}

// "2026-11-30 22:31 UTC": when a run started, for the report's reader.
std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  return std::string(text, std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", &tm));
}

void print_machine(const options& o, const std::string& started, const std::string& load_at_start) {
  utsname u{};
  uname(&u);
  std::string cpu;
  {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("model name")) {
        cpu = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  const std::string shim = sandbox::tool_paths::from_environment().shim;
  std::cout << "## Machine and versions\n\n| | |\n| --- | --- |\n";
  std::cout << fmt::format("| date | {} (start of the run) |\n", started);
  std::cout << fmt::format("| CPU | {} x {} (`nproc` {}) |\n", cpu,
                           std::thread::hardware_concurrency(), sysconf(_SC_NPROCESSORS_ONLN));
  std::cout << fmt::format("| kernel | {} {} |\n", u.sysname, u.release);
  std::cout << fmt::format("| load average (1/5/15 min) | at start {}, at end {} |\n",
                           load_at_start, load_average());
  std::cout << fmt::format("| shim build | {} |\n", o.build_info);
  std::cout << fmt::format("| g++ | {} |\n", first_line(run_and_read("g++ --version")));
  std::cout << fmt::format("| Boost | {} (headers the shim was built with) |\n", BOOST_LIB_VERSION);
  std::cout << fmt::format("| fmt | {} |\n", dpkg_version("libfmt9"));
  std::cout << fmt::format("| systemd (logind, libsystemd0) | {}, {} |\n", dpkg_version("systemd"),
                           dpkg_version("libsystemd0"));
  std::cout << fmt::format("| dbus-daemon | {} |\n", dpkg_version("dbus-daemon"));
  std::cout << fmt::format("| HAProxy | {} |\n", first_line(run_and_read("/usr/sbin/haproxy -v")));
  std::cout << fmt::format("| nginx | {} ({}) |\n",
                           first_line(run_and_read("/usr/sbin/nginx -v 2>&1")),
                           dpkg_version("nginx-light").empty() ? "nginx" : "nginx-light");
  std::cout << fmt::format("| wrk | {} |\n", first_line(run_and_read("/usr/bin/wrk -v 2>&1")));
  std::cout << fmt::format("| shim binary | `{}` |\n", shim);
  std::cout << fmt::format(
      "| timestamping threads (bus observer, NOTIFY_SOCKET reader) | {} |\n\n",
      observers_realtime ? "SCHED_FIFO priority 50"
                         : "ordinary priority (SCHED_FIFO refused): their timestamps may be late");
}

std::vector<double> to_ms(const auto& samples, auto from, auto to) {
  std::vector<double> v;
  for (const auto& s : samples) {
    if (s.*from && s.*to) v.push_back(us_to_ms(diff_us(s.*from, s.*to)));
  }
  return v;
}

auto p99_below(double limit) {
  return [limit](double, double p99, double) { return p99 < limit; };
}

void print_unready(const std::vector<reboot_sample>& reboots,
                   const std::vector<sigterm_sample>& sigterms) {
  std::cout << "## Unready latency\n\n"
               "How long after the shutdown cue a client probing `/readyz` first sees 503. The "
               "prober is one thread sending GET /readyz back to back on one keep-alive "
               "connection; \"first 503\" is the moment that 503 response was read, so each "
               "figure is late by up to one probe round trip (mean probe interval: ";
  std::vector<double> intervals;
  for (const auto& r : reboots) intervals.push_back(r.probe_interval_us);
  for (const auto& r : sigterms) intervals.push_back(r.probe_interval_us);
  std::cout << fmt::format(
      "p50 {:.0f} us, max {:.0f} us), plus any wait of the prober's ordinary-priority thread for a "
      "CPU: on a busy machine the figures err on the late side.\n\n",
      median(intervals), percentile(intervals, 100));
  std::cout
      << "- *PrepareForShutdown -> first 503*: from the moment an independent bus connection (its "
         "own thread, blocked in `sd_bus_wait`, SCHED_FIFO so that a busy machine does not delay "
         "its timestamp) read logind's `PrepareForShutdown(true)` to the first 503. The shim's "
         "connection receives its copy from dbus-daemon at the same moment, "
         "so this is the shim's reaction plus at most one probe.\n"
         "- *SIGTERM -> first 503*: from just before `kill(shim, SIGTERM)` to the first 503 "
         "(attach mode, lock held, PID 1's `SystemState` = stopping).\n"
         "- Context rows: logind's own part (Reboot() call -> its signal), and the shim's "
         "`ShutdownInitiated` event (its monotonic time) after the observer's receipt.\n\n";
  print_distribution_table({
      {"PrepareForShutdown -> first 503",
       to_ms(reboots, &reboot_sample::prepare_us, &reboot_sample::first_503_us), "p99 < 5 ms",
       p99_below(5)},
      {"SIGTERM -> first 503",
       to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::first_503_us), "p99 < 5 ms",
       p99_below(5)},
      {"(context) Reboot() call -> PrepareForShutdown seen",
       to_ms(reboots, &reboot_sample::reboot_us, &reboot_sample::prepare_us),
       "",
       {}},
      {"(context) PrepareForShutdown seen -> ShutdownInitiated event",
       to_ms(reboots, &reboot_sample::prepare_us, &reboot_sample::initiated_us),
       "",
       {}},
      {"(context) SIGTERM -> ShutdownInitiated event",
       to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::initiated_us),
       "",
       {}},
  });
}

void print_hold(const options& o,
                const std::vector<std::pair<hold_scenario, std::vector<reboot_sample>>>& runs) {
  std::cout
      << "## Hold accuracy\n\n"
      << fmt::format(
             "Conditions met = the later of (`ShutdownInitiated` + drain {}) and the target's "
             "exit (the stand-in apiserver's `EXIT` line, written just before it returns "
             "from main). Lock released = the shim's `InhibitorReleased` event (written just "
             "after it closes the lock fd). `StartUnit(reboot.target)` = when the stand-in "
             "manager received logind's call. \"lock released - conditions met\" is the shim's "
             "part of the total, \"StartUnit - lock released\" logind's (it can come out "
             "slightly negative: the event is stamped just after the close, and logind may "
             "already have reacted).\n\n",
             o.drain);
  for (const auto& [sc, samples] : runs) {
    std::size_t drain_later = 0;
    for (const auto& s : samples) drain_later += s.drain_was_later ? 1 : 0;
    std::cout << fmt::format(
        "### {} (apiserver exits {} after its SIGTERM; the drain was the later condition in {} "
        "of {} reboots)\n\n",
        sc.name, sc.apiserver_shutdown_delay, drain_later, samples.size());
    std::vector<distribution_row> rows{
        {"lock released - conditions met (shim)",
         to_ms(samples, &reboot_sample::met_us, &reboot_sample::released_us), "within 20 ms (p99)",
         [](double, double p99, double) { return p99 <= 20 && p99 >= 0; }},
        {"StartUnit - lock released (logind)",
         to_ms(samples, &reboot_sample::released_us, &reboot_sample::start_unit_us),
         "",
         {}},
        {"StartUnit - conditions met (total)",
         to_ms(samples, &reboot_sample::met_us, &reboot_sample::start_unit_us),
         "within 20 ms (p99)", [](double, double p99, double) { return p99 <= 20 && p99 >= 0; }},
    };
    if (sc.later == "target") {
      rows.insert(rows.begin(),
                  distribution_row{"(context) shim's TargetExited event - target's EXIT line",
                                   to_ms(samples, &reboot_sample::target_exit_us,
                                         &reboot_sample::target_exited_event_us),
                                   "",
                                   {}});
    }
    print_distribution_table(rows);
  }
}

// The shim whose upstream check polls: its wake-ups are the probes', so the target is one probe
// per interval and a few wake-ups for each (timer, write, read), nothing more; its RSS has
// OpenSSL in it, which the 4 MiB target (set before the upstream check) does not allow for.
void print_idle_polling(const options& o, const idle_sample& s, std::vector<std::string>& summary) {
  const double probes = *s.probes;
  const double expected =
      2.0 * o.idle_seconds * 1000.0 / static_cast<double>(kProbeInterval.count());
  const auto wakes =
      s.first.voluntary + s.first.involuntary + s.second.voluntary + s.second.involuntary;
  const double per_probe = probes > 0 ? static_cast<double>(wakes) / probes : NAN;
  // The windows are 0.5 s short of the span the probe count covers: one probe more is allowed.
  const bool one_per_interval = probes <= expected + 1;
  std::cout << fmt::format(
      "| peak RSS idle, {} | VmHWM {} (VmRSS {}: anon {}, file {}); Pss {}, private (USS) {} | "
      "none (OpenSSL) |\n",
      s.mode, mib(s.hwm_kb), mib(s.rss_kb), mib(s.anon_kb), mib(s.file_kb), mib(s.pss_kb),
      mib(s.private_kb));
  std::cout << fmt::format(
      "| wake-ups idle, {}, 2 x {} s | {} voluntary + {} involuntary context switches for {:.0f} "
      "probes ({:.1f} per probe), {} CPU ticks | one probe per interval: **{}** |\n",
      s.mode, o.idle_seconds, s.first.voluntary + s.second.voluntary,
      s.first.involuntary + s.second.involuntary, probes, per_probe,
      s.first.cpu_ticks + s.second.cpu_ticks, one_per_interval ? "met" : "missed");
  summary.push_back(fmt::format(
      "idle with the upstream check on: one probe per interval: {} ({:.0f} probes in {} s, "
      "{:.1f} wake-ups per probe)",
      one_per_interval ? "met" : "missed", probes, 2 * o.idle_seconds, per_probe));
  summary.push_back(
      fmt::format("peak RSS idle with the upstream check on (OpenSSL loaded): {}", mib(s.hwm_kb)));
}

void print_startup_idle(const options& o, const std::vector<startup_sample>& off,
                        const std::vector<startup_sample>& lock,
                        const std::vector<idle_sample>& idle, const http_report* http,
                        std::vector<std::string>& summary) {
  const std::string shim = sandbox::tool_paths::from_environment().shim;
  std::cout << "## Footprint\n\n| what | measured | target |\n| --- | --- | --- |\n";
  std::error_code ec;
  const auto size = std::filesystem::file_size(shim, ec);
  const auto stripped_path =
      std::filesystem::temp_directory_path() / fmt::format("shutdown-shim-stripped.{}", getpid());
  run_and_read(fmt::format("strip -o {} {}", stripped_path.string(), shim));
  const auto stripped = std::filesystem::file_size(stripped_path, ec);
  std::filesystem::remove(stripped_path, ec);
  std::cout << fmt::format("| binary size | {} KiB as built, {} KiB stripped | |\n", size / 1024,
                           stripped / 1024);
  auto startup_row = [&](const char* what, const std::vector<startup_sample>& v) {
    std::vector<double> notify, http200;
    for (const auto& s : v) {
      notify.push_back(s.ready_notify_ms);
      http200.push_back(s.first_200_ms);
    }
    if (v.empty()) return;
    const bool met = percentile(http200, 100) < 50 && percentile(notify, 100) < 50;
    std::cout << fmt::format(
        "| start to ready, {} (n={}) | READY=1 p50 {} max {}; first 200 p50 {} max {} | < 50 ms: "
        "**{}** |\n",
        what, v.size(), ms(median(notify)), ms(percentile(notify, 100)), ms(median(http200)),
        ms(percentile(http200, 100)), met ? "met" : "missed");
    summary.push_back(
        fmt::format("ready within 50 ms of start ({}): {}", what, met ? "met" : "missed"));
  };
  startup_row("--inhibit=off", off);
  startup_row("lock taken from logind", lock);
  for (const auto& s : idle) {
    if (s.probes) {
      print_idle_polling(o, s, summary);
      continue;
    }
    const bool rss_met = s.hwm_kb < 4096;
    std::cout << fmt::format(
        "| peak RSS idle, {} | VmHWM {} (VmRSS {}: anon {}, file {}); Pss {}, private (USS) {} | "
        "VmHWM < 4 MiB: **{}** |\n",
        s.mode, mib(s.hwm_kb), mib(s.rss_kb), mib(s.anon_kb), mib(s.file_kb), mib(s.pss_kb),
        mib(s.private_kb), rss_met ? "met" : "missed");
    for (const auto* w : {&s.first, &s.second}) {
      const bool zero = w->voluntary + w->involuntary == 0;
      const bool first = w == &s.first;
      std::cout << fmt::format(
          "| wake-ups idle, {}, {} s {} | {} voluntary + {} involuntary context switches, {} CPU "
          "ticks, {} thread(s) | 0: **{}** |\n",
          s.mode, o.idle_seconds,
          first ? "from 0.5 s after the last HTTP request" : "right after that", w->voluntary,
          w->involuntary, w->cpu_ticks, s.threads, zero ? "met" : "missed");
      summary.push_back(fmt::format("zero idle wake-ups ({}, {} window): {} ({})", s.mode,
                                    first ? "first" : "second", zero ? "met" : "missed",
                                    w->voluntary + w->involuntary));
    }
    summary.push_back(fmt::format("peak RSS idle < 4 MiB ({}): {} ({})", s.mode,
                                  rss_met ? "met" : "missed", mib(s.hwm_kb)));
  }
  if (http) {
    std::cout << fmt::format(
        "| peak RSS under load (lock held) | VmHWM {} before the wrk runs, {} after | |\n",
        mib(http->shim_hwm_before_kb), mib(http->shim_hwm_after_kb));
  }
  std::cout << "\n";
  for (const auto& s : idle) {
    if (s.mode.find("lock") == std::string::npos && !s.probes) continue;
    std::cout << "### Where the idle RSS goes (" << s.mode
              << ", from /proc/PID/smaps)\n\n| mapping | Rss | private | shared |\n"
                 "| --- | ---: | ---: | ---: |\n";
    std::uint64_t total = 0, priv = 0;
    for (const auto& m : s.mappings) {
      total += m.rss_kb;
      priv += m.private_kb;
    }
    for (std::size_t i = 0; i < s.mappings.size() && i < 14; ++i) {
      const auto& m = s.mappings[i];
      std::cout << fmt::format("| {} | {} KiB | {} KiB | {} KiB |\n", m.name, m.rss_kb,
                               m.private_kb, m.shared_kb);
    }
    std::cout << fmt::format("| total ({} mappings) | {} KiB | {} KiB | |\n\n", s.mappings.size(),
                             total, priv);
  }
}

void print_http(const options& o, const http_report& r, std::vector<std::string>& summary) {
  std::cout << "## /readyz under load (wrk)\n\n"
            << fmt::format(
                   "`wrk -t{} -c{} -d{}s --latency` against each server on 127.0.0.1, {} rounds "
                   "interleaved (shim, nginx, HAProxy, repeat); the figures are the median over "
                   "the rounds, the ratios are to nginx's. nginx: one worker, `return 200 \"ok\"`, "
                   "no access log, keep-alive requests unlimited. HAProxy: `nbthread 1`, "
                   "`monitor-uri /readyz` (its answer is a 58-byte HTML body). The shim holds its "
                   "lock against the sandbox's logind. Nothing is pinned: wrk and the server share "
                   "the machine's cores, and \"server CPU\" is the server's CPU time over the run "
                   "(1.00 = one core busy); \"CPU/request\" divides the server's CPU time (all its "
                   "processes, 10 ms tick resolution) by the requests wrk completed: the figure "
                   "that depends least on what else the machine is doing.{}\n\n",
                   o.wrk_threads, o.wrk_connections, o.wrk_seconds, o.wrk_rounds,
                   o.shim_variants.empty()
                       ? ""
                       : " Rows `shutdown-shim (LABEL)` are other builds of the shim "
                         "(--shim-variant=LABEL=PATH), run after HAProxy in each round with the "
                         "same flags.");
  for (const auto& [mode, by_server] : r.results) {
    std::cout << "### " << mode << "\n\n"
              << "| server | req/s | p50 | p99 | req/s vs nginx | p99 vs nginx | server CPU | "
                 "CPU/request | CPU/request vs nginx | errors, non-2xx |\n"
                 "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    auto med = [&](const std::string& server, double wrk_result::*field) {
      std::vector<double> v;
      for (const auto& x : by_server.at(server)) v.push_back(x.*field);
      return median(v);
    };
    const double nginx_rps = med("nginx", &wrk_result::requests_per_s);
    const double nginx_p99 = med("nginx", &wrk_result::p99_ms);
    const double nginx_cpu = med("nginx", &wrk_result::cpu_us_per_request);
    for (const auto& server : r.servers) {
      std::uint64_t errors = 0, non2xx = 0;
      for (const auto& x : by_server.at(server)) {
        errors += x.socket_errors;
        non2xx += x.non_2xx;
      }
      const double rps = med(server, &wrk_result::requests_per_s);
      const double p99 = med(server, &wrk_result::p99_ms);
      const double cpu = med(server, &wrk_result::cpu_us_per_request);
      std::cout << fmt::format(
          "| {} | {:.0f} | {:.3f} ms | {:.3f} ms | {:.2f} | {:.2f} | {:.2f} | {:.1f} us | {:.2f} "
          "| {}, {} |\n",
          server, rps, med(server, &wrk_result::p50_ms), p99, rps / nginx_rps, p99 / nginx_p99,
          med(server, &wrk_result::server_cpu), cpu, cpu / nginx_cpu, errors, non2xx);
      if (server == "shutdown-shim" || server == kPollingServer) {
        const std::string what = server == kPollingServer ? mode + ", upstream check on" : mode;
        summary.push_back(fmt::format("/readyz req/s >= nginx ({}): {} ({:.2f}x)", what,
                                      rps >= nginx_rps ? "met" : "missed", rps / nginx_rps));
        summary.push_back(fmt::format("/readyz p99 <= nginx ({}): {} ({:.2f}x)", what,
                                      p99 <= nginx_p99 ? "met" : "missed", p99 / nginx_p99));
      }
    }
    std::cout << "\n";
  }
}

void print_upstream(const upstream_report& r, std::vector<std::string>& summary) {
  const auto window = kProbeFall * (kProbeInterval + kProbeTimeout);
  std::cout << fmt::format(
      "## The target and upstream checks\n\n"
      "A shim (--inhibit=off) with its target check on the stand-in apiserver's pidfile and its "
      "upstream check on the apiserver's /readyz over HTTPS (CA file, interval {} ms, timeout {} "
      "ms, fall {}, rise {}). *Crash*: SIGKILL of the apiserver to the first 503, seen by a "
      "back-to-back prober (mean probe interval p50 {:.0f} us); the pidfd reports the exit, no "
      "probe is needed. *Hang*: SIGSTOP of the apiserver to the first 503, seen by a prober every "
      "millisecond; the configured window is fall x (interval + timeout) = {} ms.\n\n",
      kProbeInterval.count(), kProbeTimeout.count(), kProbeFall, kProbeRise,
      median(r.crash_probe_interval_us), window.count());
  const double window_ms = static_cast<double>(window.count());
  print_distribution_table({
      {"apiserver SIGKILL -> first 503", r.crash_ms, "p99 < 5 ms", p99_below(5)},
      {"apiserver SIGSTOP -> first 503", r.hang_ms, fmt::format("max <= {} ms", window.count()),
       [window_ms](double, double, double mx) { return mx <= window_ms; }},
  });
  if (!r.crash_ms.empty()) {
    const double p99 = percentile(r.crash_ms, 99);
    summary.push_back(fmt::format("apiserver crash to 503, p99 < 5 ms: {} (p50 {}, p99 {})",
                                  p99 < 5 ? "met" : "missed", ms(median(r.crash_ms)), ms(p99)));
  }
  if (!r.hang_ms.empty()) {
    const double mx = percentile(r.hang_ms, 100);
    summary.push_back(fmt::format("apiserver hang to 503 within the window ({} ms): {} (max {})",
                                  window.count(), mx <= window_ms ? "met" : "missed", ms(mx)));
  }
}

int run(const options& o) {
  const std::string started = utc_now();
  const std::string load_at_start = load_average();
  std::vector<std::string> summary;
  std::vector<std::pair<hold_scenario, std::vector<reboot_sample>>> holds;
  std::vector<reboot_sample> all_reboots;
  std::vector<sigterm_sample> sigterms;
  std::vector<startup_sample> start_off, start_lock;
  std::vector<idle_sample> idle;
  std::optional<http_report> http;
  std::optional<upstream_report> upstream;

  if (o.sections.count("reboot")) {
    const std::uint64_t drain_ms = duration_us(o.drain) / 1000;
    for (const hold_scenario& sc :
         {hold_scenario{"the target exits after the drain", fmt::format("{}ms", drain_ms + 300),
                        "target"},
          hold_scenario{"the drain ends after the target exits", "0", "drain"}}) {
      std::cerr << "reboots: " << sc.name << "\n";
      auto samples = run_reboots(o, sc);
      all_reboots.insert(all_reboots.end(), samples.begin(), samples.end());
      holds.emplace_back(sc, std::move(samples));
    }
  }
  if (o.sections.count("sigterm")) {
    std::cerr << "SIGTERM to the shim\n";
    sigterms = run_sigterms(o);
  }
  if (o.sections.count("startup") || o.sections.count("idle") || o.sections.count("http") ||
      o.sections.count("upstream")) {
    sandbox::node_sandbox sb;
    try {
      if (o.sections.count("startup")) {
        std::cerr << "start-up\n";
        start_off = run_startups(sb, o, false);
        start_lock = run_startups(sb, o, true);
      }
      if (o.sections.count("idle")) {
        std::cerr << "idle for " << o.idle_seconds << " s\n";
        idle = run_idle(sb, o);
      }
      if (o.sections.count("http")) {
        std::cerr << "wrk\n";
        http = run_http(sb, o);
      }
      if (o.sections.count("upstream")) {
        std::cerr << "apiserver crashes and hangs\n";
        upstream = run_upstream(sb, o);
      }
    } catch (...) {
      sb.dump_logs(std::cerr, 40);
      throw;
    }
  }

  std::cout << "# shutdown-shim benchmarks\n\n"
               "Produced by `scripts/bench` in one run on a sandboxed node (private dbus-daemon, "
               "the real systemd-logind, a stand-in PID 1 manager and kube-apiserver). Figures "
               "are distributions or ratios from this run only; the machine is shared and noisy, "
               "so compare runs by their ratios, not their absolute times. Percentiles are "
               "nearest-rank: with fewer than 100 samples p99 is one of the largest two.\n\n";
  print_machine(o, started, load_at_start);
  if (!all_reboots.empty() || !sigterms.empty()) {
    print_unready(all_reboots, sigterms);
    auto pfs = to_ms(all_reboots, &reboot_sample::prepare_us, &reboot_sample::first_503_us);
    auto term = to_ms(sigterms, &sigterm_sample::kill_us, &sigterm_sample::first_503_us);
    if (!pfs.empty()) {
      summary.push_back(fmt::format("unready p99 < 5 ms after PrepareForShutdown: {} ({})",
                                    percentile(pfs, 99) < 5 ? "met" : "missed",
                                    ms(percentile(pfs, 99))));
    }
    if (!term.empty()) {
      summary.push_back(fmt::format("unready p99 < 5 ms after SIGTERM: {} ({})",
                                    percentile(term, 99) < 5 ? "met" : "missed",
                                    ms(percentile(term, 99))));
    }
  }
  if (!holds.empty()) {
    print_hold(o, holds);
    for (const auto& [sc, samples] : holds) {
      const double shim_p99 =
          percentile(to_ms(samples, &reboot_sample::met_us, &reboot_sample::released_us), 99);
      const double p99 =
          percentile(to_ms(samples, &reboot_sample::met_us, &reboot_sample::start_unit_us), 99);
      summary.push_back(fmt::format(
          "lock released within 20 ms of the conditions ({}): {} (p99 {}); reboot.target started "
          "within 20 ms: {} (p99 {})",
          sc.name, shim_p99 <= 20 ? "met" : "missed", ms(shim_p99), p99 <= 20 ? "met" : "missed",
          ms(p99)));
    }
  }
  if (!start_off.empty() || !start_lock.empty() || !idle.empty() || http) {
    print_startup_idle(o, start_off, start_lock, idle, http ? &*http : nullptr, summary);
  }
  if (http) print_http(o, *http, summary);
  if (upstream) print_upstream(*upstream, summary);
  std::cout << "## Targets\n\n";
  for (const auto& s : summary) std::cout << "- " << s << "\n";
  std::cout << "\n";
  return 0;
}

}  // namespace bench

int main(int argc, char** argv) {
  // First of all: nothing in this process may reach the machine's own system bus.
  sandbox::prepare_sandbox_process();
  const auto opts = bench::parse_options(argc, argv);
  if (geteuid() != 0) {
    std::cerr << "bench_driver needs root: it runs systemd-logind in its own mount namespace\n";
    return 1;
  }
  try {
    return bench::run(opts);
  } catch (const std::exception& e) {
    std::cerr << "bench_driver: " << e.what() << "\n";
    return 1;
  }
}
