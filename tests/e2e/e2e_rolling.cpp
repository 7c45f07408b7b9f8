// The rolling-upgrade e2e test (issue 24): a whole control-plane upgrade behind one load balancer.
// Three sandboxed nodes, each in its own child process (this binary with --serve-node, since a
// node_sandbox owns its process's DBUS_SYSTEM_BUS_ADDRESS) with a private dbus-daemon, the real
// systemd-logind, the stand-in PID 1 manager, a stand-in kube-apiserver and, with the shim, a
// shutdown-shim, sit behind the real HAProxy, set up as OpenShift's on-prem load balancer is (mode
// tcp; `option httpchk GET /readyz HTTP/1.0` against the apiserver's own port; `retries 3`
// without redispatch; client and server timeouts 1m, tunnel 5m). The driver reboots the nodes one
// after the other as the machine-config operator does: the next node's reboot starts only when the
// previous node's shim is ready again and HAProxy's stats socket shows it UP.
//
// A reboot: logind's Reboot; once reboot.target starts, the node is gone from the network: its
// processes are frozen (SIGSTOP: a host that has gone answers nothing, not even with a FIN or a
// reset) for the boot time; then they are killed (the new kernel answers the old connections with
// a reset) and the node boots: a new sandbox, a new apiserver process on the same port, a new shim.
// Without the shim (the baseline) reboot.target starts at once and the apiserver never gets a
// signal, as in e2e_disruption's baseline-no-signal. With it, the shim turns unready, SIGTERMs the
// apiserver (whose /readyz fails, so HAProxy takes the node out) and holds the reboot until the
// apiserver has drained and exited.
//
// Clients, all through HAProxy, for the whole upgrade: e2e_disruption's sampler (new connections
// and two kept-alive ones), and per node two stand-in node agents that PATCH their node every
// 200 ms on a kept-alive connection: a naive one (any error is Degraded, as the machine-config
// daemon of seed 000) and one that retries with backoff and is Degraded only when its errors last
// 10 s. Each agent's connection is placed on the next node (round robin, re-dialled until it lands
// there), so every reboot has a naive and a retrying agent kept alive on the node that leaves.
//
// --check: with the shim, 0 failed requests, 0 agent errors (but for a PATCH written as the
// server's shutdown closed its idle connection, counted apart) and 0 Degraded transitions; in the
// baseline, failed requests and naive agents going Degraded (else the test could not tell); and,
// from the nodes' and HAProxy's own records, no node's reboot started before the previous node was
// ready again and UP in HAProxy. --unordered reboots the next node as soon as the previous one's
// reboot.target started, which that check must catch.
//
// --settings=kubeadm: kube-apiserver's shutdown delay 0 and the LB checking the shim (issue 32);
// --settings=openshift: --shutdown-send-retry-after as well, every client waiting out a
// Retry-After as client-go does. --server=real --realapi-dir=DIR (issue 33): kube-apiserver is
// tests/realapi's realapi over TLS with a bearer token, and per node a naive and a retrying
// client-go agent write their node through the LB beside the others; --check then wants of them
// what it wants of the stand-in agents on the stand-in (none failed, no naive one Degraded with
// the shim; a naive one Degraded without it), and of the stand-in agents, whose HTTP/1.1 PATCH
// can race realapi's close of idle connections (see check()), a naive one Degraded without it.
//
// Exit status: 0 the upgrade ran (and, with --check, met the criteria), 1 otherwise, 2 usage,
// 77 cannot run here (not root, no haproxy) unless CI=true.

#include <fcntl.h>
#include <fmt/core.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "agent_verdict.hpp"
#include "client_go_agents.hpp"
#include "e2e_common.hpp"
#include "haproxy.hpp"
#include "load_client.hpp"
#include "node_sandbox.hpp"
#include "process.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using e2e::agent_policy;
using e2e::agent_verdict;
using e2e::flag;
using e2e::judge;
using e2e::parse_seconds;
using e2e::seconds;
using e2e::stop_times;
using e2e::wait_until;

// --- settings -----------------------------------------------------------------------------------

constexpr unsigned kNodes = 3;
constexpr int kControlFd = 3;  // where a node process reads its commands ("reboot")

// common_settings' defaults, but rise 1 as OpenShift's HAProxy has it.
struct settings : e2e::common_settings {
  double boot_s = 0;             // how long a node is gone; 0: 2 x fall x inter
  double agent_period_s = 0.2;   // a node agent's PATCH every ...
  double degraded_after_s = 10;  // the retrying agent: Degraded when errors last this long
  // --production: 70 s drain, 65 s exit timeout, inter 5s fall 3 rise 1, TLS to the apiserver and
  // HAProxy's check over TLS (check-ssl verify none), as OpenShift's on-prem load balancer.
  bool production = false;
  bool ordered = true;  // --unordered: the next reboot without waiting for the previous node
  // --settings: lb-apiserver (kube-apiserver's shutdown delay = the drain, the LB checking its
  // /readyz), kubeadm (issue 32: kubeadm's delay of 0, the LB checking the shim where there is
  // one), openshift (lb-apiserver with --shutdown-send-retry-after, every client waiting out a
  // Retry-After as client-go does).
  std::string setup = "lb-apiserver";
  std::vector<std::string> variants;
};

const std::vector<std::string> kSetups = {"lb-apiserver", "kubeadm", "openshift"};

bool kubeadm(const settings& s) { return s.setup == "kubeadm"; }
bool retry_after(const settings& s) { return s.setup == "openshift"; }
double apiserver_delay_s(const settings& s) { return kubeadm(s) ? 0 : s.drain_s; }

const std::vector<std::string> kVariants = {"baseline", "shim"};

[[noreturn]] void usage(const std::string& error) {
  fmt::print(stderr,
             "e2e_rolling: {}\n"
             "usage: e2e_rolling [--production] [--drain=3s] [--exit-timeout=10s] [--boot=DUR]\n"
             "  [--inter=1s] [--fall=2] [--rise=1] [--rate=200] [--request-time=15ms]\n"
             "  [--agent-period=200ms] [--degraded-after=10s] [--lead=2s] [--tail=2s]\n"
             "  [--request-timeout=10s] [--variant=baseline|shim]... [--unordered]\n"
             "  [--settings=lb-apiserver|kubeadm|openshift] [--server=stand-in|real\n"
             "  --realapi-dir=DIR] [--out-dir=DIR] [--check]\n",
             error);
  std::exit(2);
}

settings parse(int argc, char** argv) {
  settings s;
  s.rise = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--production") continue;
    s.production = true;
    s.drain_s = 70;
    s.exit_timeout_s = 65;
    s.inter = "5s";
    s.fall = 3;
    s.rise = 1;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    try {
      if (a == "--production" || e2e::parse_common_flag(a, s)) {
        continue;
      } else if (auto v = flag(a, "--boot")) {
        s.boot_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--agent-period")) {
        s.agent_period_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--degraded-after")) {
        s.degraded_after_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--variant")) {
        if (std::find(kVariants.begin(), kVariants.end(), *v) == kVariants.end())
          usage("unknown variant " + *v);
        s.variants.push_back(*v);
      } else if (a == "--unordered") {
        s.ordered = false;
      } else if (auto v = flag(a, "--settings")) {
        if (std::find(kSetups.begin(), kSetups.end(), *v) == kSetups.end())
          usage("unknown settings " + *v);
        s.setup = *v;
      } else {
        usage(fmt::format("unknown argument '{}'", a));
      }
    } catch (const std::invalid_argument& e) {
      usage(fmt::format("bad value in '{}': {}", a, e.what()));
    }
  }
  if (s.variants.empty()) s.variants = kVariants;
  if (s.real_server && s.realapi_dir.empty()) usage("--server=real needs --realapi-dir");
  // As long as HAProxy takes at most to mark a silent node down (fall checks, each waiting inter
  // for its answer, inter after the one before), so that the node leaves the load balancer while it
  // is gone, as in a real boot's minutes (measured: 3.2-3.3 s of 4 s by default).
  if (s.boot_s == 0) s.boot_s = parse_seconds(s.inter) * s.fall * 2;
  if (s.rate <= 0 || s.fall == 0 || s.rise == 0 || s.agent_period_s <= 0)
    usage("rate, fall, rise and the agent period must be positive");
  return s;
}

std::string node_name(unsigned i) { return fmt::format("node-{}", i + 1); }

// --- a node: a child process that reboots on command -------------------------------------------

// One line per milestone in DIR/NAME.events, read by the driver: BOOTED, REBOOT_REQUESTED (just
// before logind's Reboot), REBOOT_TARGET (the stand-in manager's StartUnit time), GONE (the
// node's processes frozen).
class node_events {
 public:
  explicit node_events(const fs::path& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~node_events() {
    if (fd_ >= 0) close(fd_);
  }
  node_events(const node_events&) = delete;
  node_events& operator=(const node_events&) = delete;
  void write(std::string_view word, std::uint64_t usec) {
    const std::string line = fmt::format("{} {}\n", word, usec);
    [[maybe_unused]] const ssize_t n = ::write(fd_, line.data(), line.size());
  }

 private:
  int fd_;
};

struct node_options {
  fs::path dir;
  std::string name;
  std::uint16_t api_port = 0;
  std::uint16_t shim_port = 0;  // 0: no shim (the baseline)
  e2e::api_server server;       // with TLS: the CA the shim's upstream check trusts
  settings s;
};

// The node's life: boots, and reboots whenever the driver writes "reboot" to kControlFd.
class rolling_node {
 public:
  explicit rolling_node(node_options o)
      : o_(std::move(o)), events_(o_.dir / (o_.name + ".events")) {}

  void boot() {
    sandbox::sandbox_options so;
    so.inhibit_delay_max = fmt::format("{}", std::llround(hold_bound_s()));
    sandbox_.reset();
    sandbox_ = std::make_unique<sandbox::node_sandbox>(so);
    auto& node = *sandbox_;
    std::ofstream(o_.dir / (o_.name + ".dir"), std::ios::trunc) << node.dir().string() << "\n";
    auto argv = e2e::apiserver_argv(o_.server, o_.name, o_.api_port, node.dir(),
                                    apiserver_delay_s(o_.s), o_.s.request_time_s);
    if (retry_after(o_.s)) argv.push_back("--shutdown-send-retry-after");
    apiserver_ = &node.spawn("kube-apiserver", argv);
    if (!wait_until([&] { return e2e::read_pid(pidfile()).has_value(); }, 20s))
      throw std::runtime_error(o_.name + ": the apiserver did not start");
    shim_ = nullptr;
    if (o_.shim_port) {
      auto shim = e2e::shim_argv(node.tools().shim, o_.shim_port, o_.s.drain_s, o_.s.exit_timeout_s,
                                 node.dir() / "shim-events.jsonl", node.dir() / "runtime");
      shim.push_back("--target-pidfile=" + pidfile().string());
      // The upstream check, on as the unit ships it: ready again only once the new apiserver is.
      shim.push_back(fmt::format("--upstream-readyz={}://127.0.0.1:{}/readyz",
                                 e2e::api_scheme(o_.server), o_.api_port));
      if (o_.server.tls()) shim.push_back("--upstream-ca-file=" + o_.server.ca.string());
      shim_ = &node.spawn("shutdown-shim", shim);
      if (!node.wait_for_inhibitor_of("shutdown-shim", shim_->pid(), 30s))
        throw std::runtime_error(o_.name + ": the shim did not take its lock");
    }
    events_.write("BOOTED", sandbox::monotonic_us());
  }

  void reboot() {
    auto& node = *sandbox_;
    const auto t0 = node.reboot();
    events_.write("REBOOT_REQUESTED", t0);
    const auto start = node.wait_for_start_unit(
        "reboot.target", std::chrono::milliseconds(std::llround(hold_bound_s() * 1000)), t0);
    if (!start) throw std::runtime_error(o_.name + ": logind never started reboot.target");
    events_.write("REBOOT_TARGET", start->usec);
    apiserver_->signal(SIGSTOP);
    if (shim_) shim_->signal(SIGSTOP);
    events_.write("GONE", sandbox::monotonic_us());
    e2e::sleep_s(o_.s.boot_s);
    keep_logs();
    boot();
  }

 private:
  double hold_bound_s() const { return o_.s.drain_s + o_.s.exit_timeout_s + 30; }
  fs::path pidfile() const { return sandbox_->dir() / (o_.name + ".pid"); }

  // What the driver reads after the run, from each boot: the shim's events, the apiserver's logs.
  void keep_logs() {
    std::error_code ec;
    for (const auto& f : {std::string("shim-events.jsonl"), o_.name + "-lifecycle.log",
                          o_.name + "-signals.log", std::string("shutdown-shim.log")}) {
      fs::copy_file(sandbox_->dir() / f, o_.dir / fmt::format("{}-boot{}-{}", o_.name, boots_, f),
                    fs::copy_options::overwrite_existing, ec);
    }
    ++boots_;
  }

  node_options o_;
  node_events events_;
  std::unique_ptr<sandbox::node_sandbox> sandbox_;
  sandbox::child_process* apiserver_ = nullptr;
  sandbox::child_process* shim_ = nullptr;
  unsigned boots_ = 0;
};

// `--serve-node --dir=D --name=N --api-port=P [--shim-port=Q] [the run's flags]`: boots, then
// reboots for every "reboot" line on kControlFd; ends at its EOF (or SIGTERM: the termination
// cleanup kills its processes and removes its sandbox directory).
int serve_node(int argc, char** argv) {
  node_options o;
  std::vector<char*> run_flags = {argv[0]};
  for (int i = 2; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (e2e::parse_server_flag(a, o.server))
      continue;
    else if (auto v = flag(a, "--dir"))
      o.dir = *v;
    else if (auto v = flag(a, "--name"))
      o.name = *v;
    else if (auto v = flag(a, "--api-port"))
      o.api_port = static_cast<std::uint16_t>(std::stoul(*v));
    else if (auto v = flag(a, "--shim-port"))
      o.shim_port = static_cast<std::uint16_t>(std::stoul(*v));
    else
      run_flags.push_back(argv[i]);
  }
  o.s = parse(static_cast<int>(run_flags.size()), run_flags.data());
  // The node's own processes do not inherit the command pipe.
  fcntl(kControlFd, F_SETFD, FD_CLOEXEC);
  try {
    rolling_node node(o);
    node.boot();
    std::string line;
    char c;
    while (read(kControlFd, &c, 1) == 1) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line == "reboot") node.reboot();
      line.clear();
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", o.name, e.what());
    return 1;
  }
  return 0;
}

// --- the node agents ----------------------------------------------------------------------------

double rel_s(std::uint64_t t, std::uint64_t t0) {
  return (static_cast<double>(t) - static_cast<double>(t0)) / 1e6;
}

// The retrying agent's wait after its n-th error in a row: one period after the first, doubled
// after each further one, at most 16 periods (3.2 s), as client-go's and the machine-config
// daemon's backoffs grow; one period after a success.
std::chrono::microseconds retry_pause(unsigned errors_in_a_row, double period_s) {
  const double factor =
      errors_in_a_row ? std::min(16.0, std::pow(2.0, errors_in_a_row - 1.0)) : 1.0;
  return std::chrono::microseconds(std::llround(period_s * factor * 1e6));
}

struct node_agent {
  std::string node;  // the node it writes
  agent_policy policy;
  std::unique_ptr<e2e::load_client> client;
};

e2e::load_options agent_options(const settings& s, const e2e::api_server& server,
                                std::uint16_t fe_port, const std::string& node,
                                agent_policy policy) {
  e2e::load_options o;
  o.port = fe_port;
  o.target = "/api/v1/nodes/" + node;
  o.method = "PATCH";
  o.content_type = "application/merge-patch+json";
  o.body = R"({"metadata":{"annotations":{"machineconfiguration.openshift.io/state":"Done"}}})";
  o.rate = 1 / s.agent_period_s;
  o.timeout = std::chrono::milliseconds(std::llround(s.request_timeout_s * 1000));
  o.keep_alive_connections = 1;
  o.new_connections = false;
  e2e::set_client_auth(server, o);
  o.client_go_retry_after = retry_after(s);
  if (policy == agent_policy::retry) {
    // Runs on the client's one thread only.
    o.pause_after = [errors = 0u, period = s.agent_period_s](const e2e::request_record& r) mutable {
      errors = r.failed() ? errors + 1 : 0;
      return retry_pause(errors, period);
    };
  }
  return o;
}

// Starts an agent whose kept-alive connection is on node `on`: the load balancer's round robin
// puts each new connection on the next node, so a connection that landed elsewhere is dropped and
// dialled again (before the sampler starts, nothing else moves the round robin).
std::optional<node_agent> place_agent(const settings& s, const e2e::api_server& server,
                                      std::uint16_t fe_port, const std::string& node,
                                      agent_policy policy, const std::string& on) {
  for (unsigned attempt = 0; attempt < 2 * kNodes; ++attempt) {
    auto client =
        std::make_unique<e2e::load_client>(agent_options(s, server, fe_port, node, policy));
    wait_until([&] { return !client->records().empty(); }, 5s);
    const auto records = client->records();
    if (!records.empty() && !records.front().failed() && records.front().backend == on)
      return node_agent{node, policy, std::move(client)};
    client->stop();
  }
  return std::nullopt;
}

// --- one upgrade --------------------------------------------------------------------------------

struct node_record {
  std::string name;
  std::optional<std::uint64_t> reboot_requested, reboot_target, gone, booted;
  std::optional<std::uint64_t> unready;  // the shim's ShutdownInitiated
  std::optional<std::uint64_t> ready;    // ready again after the boot (the driver saw it)
  std::optional<std::uint64_t> lb_down, lb_up;
  double out_of_lb_s() const {
    return lb_down && lb_up ? static_cast<double>(*lb_up - *lb_down) / 1e6 : 0;
  }
  // Back: ready again and UP in HAProxy.
  std::optional<std::uint64_t> back() const {
    if (!ready || !lb_up) return std::nullopt;
    return std::max(*ready, *lb_up);
  }
};

struct upgrade_result {
  std::string variant;
  std::uint64_t t0_us = 0;  // the first reboot request
  std::vector<e2e::request_record> sampler;
  std::map<agent_policy, std::vector<agent_verdict>> agents;
  std::vector<std::vector<e2e::request_record>> agent_records;  // by agent, for the picture
  std::vector<e2e::go_agent_verdict> go_agents;  // against realapi: client-go's agents
  std::vector<node_record> nodes;
  std::vector<std::string> order_violations;
  std::vector<std::string> problems;

  std::size_t failed() const {
    return static_cast<std::size_t>(
        std::count_if(sampler.begin(), sampler.end(), [](const auto& r) { return r.failed(); }));
  }
  std::size_t agent_errors(agent_policy p) const { return sum(p, &agent_verdict::errors); }
  std::size_t idle_close_losses(agent_policy p) const {
    return sum(p, &agent_verdict::idle_close_losses);
  }
  std::size_t degraded(agent_policy p) const { return sum(p, &agent_verdict::degraded); }
  double longest_error_run_s(agent_policy p) const {
    double longest = 0;
    if (const auto it = agents.find(p); it != agents.end()) {
      for (const auto& v : it->second) longest = std::max(longest, v.longest_error_run_s);
    }
    return longest;
  }
  std::size_t sum(agent_policy p, std::size_t agent_verdict::*field) const {
    const auto it = agents.find(p);
    std::size_t n = 0;
    if (it != agents.end()) {
      for (const auto& v : it->second) n += v.*field;
    }
    return n;
  }
  std::optional<double> upgrade_s() const {
    const auto last = nodes.empty() ? std::nullopt : nodes.back().back();
    if (!last) return std::nullopt;
    return static_cast<double>(*last - t0_us) / 1e6;
  }
};

std::optional<std::uint64_t> event_at(const fs::path& events, const std::string& word,
                                      std::uint64_t since_us = 0) {
  for (const auto& l : sandbox::read_timed_lines(events)) {
    if (l.word == word && l.usec >= since_us) return l.usec;
  }
  return std::nullopt;
}

// A node process of the run and the pipe it reads its commands from.
struct node_process {
  std::string name;
  std::uint16_t api_port = 0, shim_port = 0;
  fs::path events;
  int control = -1;  // the pipe's write end
  sandbox::child_process process;
  fs::path dir_file;

  node_process() = default;
  node_process(const node_process&) = delete;
  node_process& operator=(const node_process&) = delete;
  ~node_process() {
    if (control >= 0) close(control);
    if (process.started()) e2e::stop_node_process(process, dir_file);
  }
  bool command(std::string_view line) {
    const std::string text = std::string(line) + "\n";
    return write(control, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }
};

void start_node(node_process& n, const fs::path& out, const fs::path& self,
                const std::vector<std::string>& run_flags) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  n.control = fds[1];
  n.events = out / (n.name + ".events");
  n.dir_file = out / (n.name + ".dir");
  std::error_code ec;
  fs::remove(n.events, ec);
  fs::remove(n.dir_file, ec);
  std::vector<std::string> argv = {self.string(), "--serve-node", "--dir=" + out.string(),
                                   "--name=" + n.name, fmt::format("--api-port={}", n.api_port)};
  if (n.shim_port) argv.push_back(fmt::format("--shim-port={}", n.shim_port));
  argv.insert(argv.end(), run_flags.begin(), run_flags.end());
  sandbox::spawn_options o;
  for (char** e = environ; e && *e; ++e) o.env.emplace_back(*e);
  o.stdout_path = out / (n.name + ".log");
  o.pass_fds = {{fds[0], kControlFd}};
  n.process = sandbox::child_process(n.name, argv, o);
  close(fds[0]);
}

// The shim's ShutdownInitiated of each boot's event log, in order.
std::vector<std::uint64_t> shim_unready_times(const fs::path& out, const std::string& name) {
  std::vector<std::uint64_t> times;
  for (unsigned boot = 0;; ++boot) {
    const auto log = out / fmt::format("{}-boot{}-shim-events.jsonl", name, boot);
    if (!fs::exists(log)) break;
    for (const auto& e : sandbox::read_event_log(log)) {
      if (e.event == "ShutdownInitiated") times.push_back(e.monotonic_us);
    }
  }
  return times;
}

stop_times stopped_listening_times(const fs::path& out, const std::vector<std::string>& names) {
  stop_times stopped;
  for (const auto& name : names) {
    for (unsigned boot = 0;; ++boot) {
      const auto log = out / fmt::format("{}-boot{}-{}-lifecycle.log", name, boot, name);
      if (!fs::exists(log)) break;
      for (const auto& l : sandbox::read_timed_lines(log)) {
        if (l.word == "STOPPED_LISTENING") stopped[name].push_back(l.usec);
      }
    }
  }
  return stopped;
}

// The ordering, from the records of the nodes (their reboot requests) and of HAProxy (UP): every
// node's reboot after the previous node was ready again and UP.
std::vector<std::string> order_violations(const std::vector<node_record>& nodes,
                                          std::uint64_t t0_us) {
  std::vector<std::string> v;
  auto rel = [&](std::optional<std::uint64_t> t) {
    return t ? fmt::format("{:+.3f} s",
                           (static_cast<double>(*t) - static_cast<double>(t0_us)) / 1e6)
             : std::string("never");
  };
  for (std::size_t i = 1; i < nodes.size(); ++i) {
    const auto& prev = nodes[i - 1];
    const auto& next = nodes[i];
    const auto back = prev.back();
    if (!next.reboot_requested || !back || *next.reboot_requested <= *back) {
      v.push_back(fmt::format(
          "{}'s reboot started at {}, before {} was back (ready again {}, UP in HAProxy {})",
          next.name, rel(next.reboot_requested), prev.name, rel(prev.ready), rel(prev.lb_up)));
    }
  }
  return v;
}

upgrade_result run_upgrade(const settings& s, const std::string& variant, const fs::path& self,
                           const std::vector<std::string>& run_flags) {
  upgrade_result res;
  res.variant = variant;
  const fs::path out = fs::absolute(s.out_dir / variant);
  fs::create_directories(out);
  const bool shim = variant == "shim";
  auto fail = [&](const std::string& why) {
    res.problems.push_back(why);
    fmt::print(stderr, "rolling-upgrade {}: {} (the nodes' logs are in {})\n", variant, why,
               out.string());
    return res;
  };
  // TLS with --production, and always with realapi (it serves nothing else).
  const e2e::api_server server =
      e2e::make_api_server(s, sandbox::tool_paths::from_environment().fake_apiserver,
                           s.production || s.real_server ? out / "pki" : fs::path());
  std::vector<std::string> node_flags = run_flags;
  for (auto& f : e2e::server_flags(server)) node_flags.push_back(std::move(f));

  const std::uint16_t fe_port = e2e::next_service_port();
  const std::uint16_t stats_port = e2e::next_service_port();
  std::vector<node_process> nodes(kNodes);
  for (unsigned i = 0; i < kNodes; ++i) {
    nodes[i].name = node_name(i);
    nodes[i].api_port = e2e::next_service_port();
    nodes[i].shim_port = shim ? e2e::next_service_port() : 0;
    start_node(nodes[i], out, self, node_flags);
  }
  for (auto& n : nodes) {
    if (!wait_until(
            [&] { return event_at(n.events, "BOOTED").has_value() || !n.process.running(); },
            60s) ||
        !n.process.running())
      return fail(n.name + " did not come up (see " + n.name + ".log)");
    sandbox::register_cleanup_dir(e2e::read_first_line(n.dir_file));
  }

  e2e::lb_options lo;
  lo.mode = "tcp";
  lo.inter = s.inter;
  lo.fall = s.fall;
  lo.rise = s.rise;
  lo.retries = 3;
  lo.redispatch = false;
  // kubeadm: the LB checks the shim (plain HTTP) where there is one; else kube-apiserver's own
  // /readyz as OpenShift's on-prem HAProxy does, over TLS where it serves TLS.
  const bool check_shim = shim && kubeadm(s);
  if (!kubeadm(s)) lo.check_version = "HTTP/1.0";
  lo.check_ssl = !check_shim && server.tls();
  lo.timeout_client_server = "1m";
  lo.timeout_tunnel = "5m";
  lo.stats_port = stats_port;
  lo.frontend_port = fe_port;
  for (const auto& n : nodes)
    lo.servers.push_back({n.name, n.api_port, check_shim ? n.shim_port : n.api_port});
  e2e::haproxy lb(s.haproxy, out, lo);
  auto all_up = [&] {
    try {
      const auto status = e2e::server_status(stats_port);
      return std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) {
        const auto it = status.find(n.name);
        return it != status.end() && it->second == "UP";
      });
    } catch (const std::exception&) {
      return false;
    }
  };
  if (!wait_until(all_up, 30s, 50ms)) return fail("HAProxy did not show every node UP");

  // The agents, each kept alive on the next node, then the sampler.
  std::vector<node_agent> agents;
  for (const auto policy : {agent_policy::naive, agent_policy::retry}) {
    for (unsigned i = 0; i < kNodes; ++i) {
      auto a = place_agent(s, server, fe_port, node_name(i), policy, node_name((i + 1) % kNodes));
      if (!a) return fail("could not place " + node_name(i) + "'s agent on the next node");
      agents.push_back(std::move(*a));
    }
  }
  std::vector<std::string> names;
  for (const auto& n : nodes) names.push_back(n.name);
  std::optional<e2e::client_go_agents> go_agents;
  if (server.real) {
    go_agents.emplace(server, s.realapi_dir / "nodeagent", out, fe_port, names);
    // Before the sampler, whose two kept-alive connections round robin places on two nodes.
    if (!go_agents->wait_sending(30s)) return fail("the client-go agents did not start sending");
  }
  e2e::load_options so;
  so.port = fe_port;
  so.rate = s.rate;
  so.timeout = std::chrono::milliseconds(std::llround(s.request_timeout_s * 1000));
  so.client_go_retry_after = retry_after(s);
  e2e::set_client_auth(server, so);
  e2e::load_client sampler(so);
  e2e::sleep_s(s.lead_s);

  const double hold_bound_s = s.drain_s + s.exit_timeout_s + 30;
  const auto lb_bound = std::chrono::milliseconds(
      std::llround((parse_seconds(s.inter) * (s.fall + s.rise + 2) + 10) * 1000));
  const auto reboot_bound =
      std::chrono::milliseconds(std::llround((hold_bound_s + s.boot_s + 60) * 1000));
  res.nodes.resize(kNodes);
  for (unsigned i = 0; i < kNodes; ++i) {
    auto& n = nodes[i];
    auto& r = res.nodes[i];
    r.name = n.name;
    if (s.ordered && !all_up()) return fail("not every node was UP before " + n.name + "'s reboot");
    const auto sent = sandbox::monotonic_us();
    if (!n.command("reboot")) return fail("cannot tell " + n.name + " to reboot");
    // GONE comes right after REBOOT_TARGET: the node's processes are frozen.
    if (!wait_until([&] { return event_at(n.events, "GONE", sent).has_value(); }, reboot_bound))
      return fail(n.name + " did not reach reboot.target");
    if (i == 0) res.t0_us = *event_at(n.events, "REBOOT_REQUESTED", sent);
    if (!s.ordered) continue;
    // Back: booted again, its shim (or, without one, its apiserver) ready, UP in HAProxy.
    if (!wait_until([&] { return lb.first(n.name, "DOWN", sent).has_value(); }, reboot_bound))
      return fail("HAProxy never took " + n.name + " out");
    const auto gone = *event_at(n.events, "GONE", sent);
    if (!wait_until([&] { return event_at(n.events, "BOOTED", gone).has_value(); }, reboot_bound))
      return fail(n.name + " did not boot again");
    const std::uint16_t ready_port = shim ? n.shim_port : n.api_port;
    if (!server.tls() || shim) {
      if (!wait_until([&] { return e2e::ready_200(ready_port); }, 60s, 20ms))
        return fail(n.name + " did not become ready again");
      r.ready = sandbox::monotonic_us();
    }
    const auto down = *lb.first(n.name, "DOWN", sent);
    if (!wait_until([&] { return lb.first(n.name, "UP", down).has_value(); }, lb_bound + 60s))
      return fail("HAProxy did not take " + n.name + " back");
    if (!r.ready) r.ready = *event_at(n.events, "BOOTED", gone);  // TLS baseline: LB's check
    if (!wait_until(all_up, lb_bound, 20ms))
      return fail("HAProxy's stats do not show every node UP");
  }
  if (!s.ordered) {
    for (auto& n : nodes) {
      if (!wait_until([&] { return lb.first(n.name, "UP", res.t0_us).has_value(); },
                      reboot_bound * kNodes))
        return fail("HAProxy did not take " + n.name + " back");
    }
  }
  e2e::sleep_s(s.tail_s);
  sampler.stop();
  for (auto& a : agents) a.client->stop();
  if (go_agents) {
    go_agents->stop();
    res.go_agents = go_agents->verdicts();
  }
  lb.stop();

  res.sampler = sampler.records();
  const auto stopped = stopped_listening_times(out, names);
  for (auto& a : agents) {
    auto records = a.client->records();
    e2e::write_records_csv(out / fmt::format("agent-{}-{}.csv", a.node, to_string(a.policy)),
                           records, res.t0_us);
    res.agents[a.policy].push_back(judge(records, a.policy, s.degraded_after_s, stopped));
    res.agent_records.push_back(std::move(records));
  }
  for (unsigned i = 0; i < kNodes; ++i) {
    auto& n = nodes[i];
    auto& r = res.nodes[i];
    r.reboot_requested = event_at(n.events, "REBOOT_REQUESTED", res.t0_us);
    r.reboot_target = event_at(n.events, "REBOOT_TARGET", res.t0_us);
    r.gone = event_at(n.events, "GONE", res.t0_us);
    if (r.gone) r.booted = event_at(n.events, "BOOTED", *r.gone);
    if (r.reboot_requested) {
      r.lb_down = lb.first(n.name, "DOWN", *r.reboot_requested);
      if (r.lb_down) r.lb_up = lb.first(n.name, "UP", *r.lb_down);
    }
    if (!s.ordered && r.booted) r.ready = r.booted;
    const auto unready = shim_unready_times(out, n.name);
    if (!unready.empty()) r.unready = unready.front();
  }
  res.order_violations = order_violations(res.nodes, res.t0_us);
  return res;
}

// --- reports ------------------------------------------------------------------------------------

std::string settings_line(const settings& s) {
  const std::string check =
      kubeadm(s)
          ? "`option httpchk GET /readyz` against the shim's port (the apiserver's own, over "
            "TLS where it serves TLS, without a shim)"
          : fmt::format(
                "`option httpchk GET /readyz HTTP/1.0` against the apiserver's own "
                "port{}",
                s.production || s.real_server ? " over TLS (check-ssl verify none)" : "");
  return fmt::format(
      "Settings {}; kube-apiserver: {}. Three nodes rebooted in turn behind HAProxy (mode tcp, {}, "
      "inter {} fall {} rise {}, retries 3 without "
      "redispatch, timeouts client/server 1m, tunnel 5m); drain {} s, apiserver shutdown delay {} s"
      "{}; "
      "a node is gone for {} s at each reboot; the sampler at {} req/s on new connections and on "
      "each of two kept-alive ones; per node a naive agent and one that retries (Degraded after "
      "{} s of errors), each PATCHing every {} ms on a kept-alive connection; {}{}",
      s.setup,
      s.real_server ? "realapi (k8s.io/apiserver 0.36.4) over TLS, clients with a bearer token, "
                      "and per node a naive and a retrying client-go agent (HTTP/2, a PATCH every "
                      "second) through the LB"
                    : "the stand-in (tests/sandbox/fake_apiserver)",
      check, s.inter, s.fall, s.rise, s.drain_s, apiserver_delay_s(s),
      retry_after(s) ? " with --shutdown-send-retry-after (clients wait out Retry-After)" : "",
      s.boot_s, s.rate, s.degraded_after_s, std::llround(s.agent_period_s * 1000),
      s.real_server ? std::string("realapi answers at once")
                    : fmt::format("{} ms per answer", std::llround(s.request_time_s * 1000)),
      s.production || s.real_server ? "; clients over TLS" : "");
}

std::string table(const settings& s, const std::vector<upgrade_result>& results) {
  std::string t = settings_line(s) + "\n\n";
  t += "| variant | requests | failed | failed by kind | agent errors (naive / retry) | "
       "of them lost to the idle close (naive / retry) | longest agent error run (s, naive / "
       "retry) | Degraded transitions (naive / retry) | total "
       "upgrade time (s) | time out of the LB per node (s) | client-go agents failed / Degraded, "
       "naive | retrying |\n";
  t += "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n";
  for (const auto& r : results) {
    if (!r.problems.empty()) {
      t += fmt::format("| {} | - | - | RUN FAILED: {} | - | - | - | - | - | - | - | - |\n",
                       r.variant, r.problems.front());
      continue;
    }
    std::string out;
    for (const auto& n : r.nodes)
      out += fmt::format("{}{} {:.1f}", out.empty() ? "" : ", ", n.name, n.out_of_lb_s());
    const auto upgrade = r.upgrade_s();
    t += fmt::format(
        "| {} | {} | {} | {} | {} / {} | {} / {} | {:.1f} / {:.1f} | {} / {} | {} | {} | {} | {} "
        "|\n",
        r.variant, r.sampler.size(), r.failed(), e2e::failed_by_kind_text(r.sampler),
        r.agent_errors(agent_policy::naive), r.agent_errors(agent_policy::retry),
        r.idle_close_losses(agent_policy::naive), r.idle_close_losses(agent_policy::retry),
        r.longest_error_run_s(agent_policy::naive), r.longest_error_run_s(agent_policy::retry),
        r.degraded(agent_policy::naive), r.degraded(agent_policy::retry),
        upgrade ? fmt::format("{:.1f}", *upgrade) : "-", out,
        e2e::go_agents_text(r.go_agents, "naive"), e2e::go_agents_text(r.go_agents, "retry"));
  }
  return t;
}

// Per variant: intervals.tsv (lane, kind, start, end) and failures.tsv (lane, time), times in
// seconds from the first reboot request; the lanes are the nodes (1..3), the sampler's failed
// requests (0) and the agents' errors (-1).
void write_timeline_data(const fs::path& out, const upgrade_result& r, std::uint64_t end_us) {
  std::ofstream iv(out / "intervals.tsv", std::ios::trunc);
  auto interval = [&](unsigned lane, const char* kind, std::optional<std::uint64_t> from,
                      std::optional<std::uint64_t> to) {
    if (!from) return;
    iv << fmt::format("{}\t{}\t{:.4f}\t{:.4f}\n", lane, kind, rel_s(*from, r.t0_us),
                      rel_s(to.value_or(end_us), r.t0_us));
  };
  for (unsigned i = 0; i < r.nodes.size(); ++i) {
    const auto& n = r.nodes[i];
    const unsigned lane = i + 1;
    interval(lane, "rebooting", n.reboot_requested, n.booted);
    // Unready: from the shim's ShutdownInitiated (without it, from the moment the node is gone).
    interval(lane, "unready", n.unready ? n.unready : n.gone, n.ready);
    interval(lane, "out_of_lb", n.lb_down, n.lb_up);
  }
  std::ofstream f(out / "failures.tsv", std::ios::trunc);
  for (const auto& q : r.sampler) {
    if (q.failed()) f << fmt::format("0\t{:.4f}\n", rel_s(q.send_us, r.t0_us));
  }
  for (const auto& records : r.agent_records) {
    for (const auto& q : records) {
      if (q.failed()) f << fmt::format("-1\t{:.4f}\n", rel_s(q.send_us, r.t0_us));
    }
  }
}

// One panel per variant: a lane per node with its reboot (grey), unready (orange) and out of the
// load balancer (blue) as bars, and the failed requests and agent errors as red crosses.
std::string gnuplot_script(const std::vector<upgrade_result>& results) {
  std::string g = fmt::format(
      "# gnuplot rolling-upgrade.gp (run in the output directory)\n"
      "set terminal pngcairo size 1400,{} font 'DejaVu Sans,9'\n"
      "set output 'rolling-upgrade.png'\n"
      "set multiplot layout {},1 title 'a rolling upgrade of three nodes behind HAProxy (t = 0: "
      "the first reboot request)'\n"
      "set termoption noenhanced\n"
      "set yrange [-1.7:3.7]\n"
      "set ytics ('agent errors' -1, 'failed requests' 0, 'node-1' 1, 'node-2' 2, 'node-3' 3)\n"
      "set xlabel 'seconds since the first reboot request'\n"
      "set key outside right top\nset grid xtics\n",
      260 * results.size() + 60, results.size());
  // One time axis for every panel, to the last node's return.
  double xmax = 0;
  for (const auto& r : results) {
    for (const auto& n : r.nodes) {
      if (const auto back = n.back()) xmax = std::max(xmax, rel_s(*back, r.t0_us));
    }
  }
  g += fmt::format("set xrange [-1:{:.0f}]\n", std::ceil(xmax + 1));
  for (const auto& r : results) {
    g += fmt::format(
        "set title \"{0}: {1} requests, {2} failed; agent errors {3} naive, {4} retry; Degraded "
        "{5} naive, {6} retry\"\n"
        "plot '{0}/intervals.tsv' using 3:(strcol(2) eq 'rebooting' ? $1+0.25 : 1/0):($4-$3):(0) "
        "with vectors nohead lw 7 "
        "lc rgb 'gray60' title 'rebooting', \\\n"
        "     '' using 3:(strcol(2) eq 'unready' ? $1 : 1/0):($4-$3):(0) with vectors nohead lw 7 "
        "lc rgb '#ff8c00' title 'unready', \\\n"
        "     '' using 3:(strcol(2) eq 'out_of_lb' ? $1-0.25 : 1/0):($4-$3):(0) with vectors "
        "nohead lw 7 lc rgb '#1e64c8' title 'out of the LB'{7}\n",
        r.variant, r.sampler.size(), r.failed(), r.agent_errors(agent_policy::naive),
        r.agent_errors(agent_policy::retry), r.degraded(agent_policy::naive),
        r.degraded(agent_policy::retry),
        // gnuplot warns of a data file without points: no failures, no plot of them.
        r.failed() + r.agent_errors(agent_policy::naive) + r.agent_errors(agent_policy::retry)
            ? fmt::format(", \\\n     '{}/failures.tsv' using 2:1 with points pt 2 ps 0.8 "
                          "lc rgb '#d62728' title 'failed'",
                          r.variant)
            : std::string());
  }
  g += "unset multiplot\n";
  return g;
}

// With the shim nothing may fail; the baseline must fail, or the test could not tell.
bool check(const settings& s, const upgrade_result& r) {
  bool ok = true;
  auto fail = [&](const std::string& why) {
    fmt::print("FAIL rolling-upgrade {}: {}\n", r.variant, why);
    ok = false;
  };
  for (const auto& v : r.order_violations) fail(v);
  if (r.variant == "shim") {
    if (r.failed()) fail(fmt::format("{} failed requests with the shim (want 0)", r.failed()));
    // The stand-in agents PATCH over HTTP/1.1: a PATCH written as the server's shutdown closes
    // the idle kept-alive connection is lost (lost_to_idle_close), which no shim can prevent; on
    // the stand-in every other error counts. Against realapi it was measured once in 7 runs with
    // kubeadm's delay 0; realapi logs its stop from a lifecycle signal, not where Go closes the
    // connections, so there client-go's agents are judged instead: over HTTP/2 the GOAWAY tells
    // them what was served.
    for (const auto p : {agent_policy::naive, agent_policy::retry}) {
      const auto errors = r.agent_errors(p) - r.idle_close_losses(p);
      if (!s.real_server && (errors || r.degraded(p)))
        fail(fmt::format(
            "{} agent errors besides the {} lost to the idle close and {} Degraded transitions "
            "of the {} agents (want 0)",
            errors, r.idle_close_losses(p), r.degraded(p), to_string(p)));
    }
    if (s.real_server) {
      for (const std::string p : {"naive", "retry"}) {
        if (e2e::go_agents_text(r.go_agents, p) == "-")
          fail("the " + p + " client-go agents sent nothing: the test cannot tell");
      }
      const auto go_failed = e2e::go_agents_failed(r.go_agents);
      const auto go_degraded = e2e::go_agents_degraded(r.go_agents, "naive");
      if (go_failed || go_degraded)
        fail(
            fmt::format("the client-go agents had {} failed requests and {} naive Degraded "
                        "transitions (want 0)",
                        go_failed, go_degraded));
    }
  } else {
    if (!r.failed()) fail("no failed request without the shim: the test cannot tell");
    if (!r.degraded(agent_policy::naive))
      fail("no naive agent went Degraded without the shim: the test cannot tell");
    // A node gone under them: the naive client-go agents kept alive on it go Degraded too.
    if (s.real_server && !e2e::go_agents_degraded(r.go_agents, "naive"))
      fail("no naive client-go agent went Degraded without the shim: the test cannot tell");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  // First of all: nothing in this process may reach the machine's own system bus.
  sandbox::prepare_sandbox_process();
  if (argc > 1 && std::string_view(argv[1]) == "--serve-node") return serve_node(argc, argv);
  const settings s = parse(argc, argv);
  if (const auto why = e2e::missing_tool(s.haproxy)) return e2e::cannot_run(*why);
  if (!e2e::enter_private_network()) return 1;
  fs::create_directories(s.out_dir);
  const fs::path self = fs::read_symlink("/proc/self/exe");
  // The nodes get the run's own timing flags.
  std::vector<std::string> run_flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (!a.starts_with("--variant") && !a.starts_with("--out-dir") && a != "--check" &&
        a != "--unordered")
      run_flags.emplace_back(a);
  }

  std::vector<upgrade_result> results;
  for (const auto& variant : s.variants) {
    fmt::print("--- rolling-upgrade {}\n", variant);
    std::fflush(stdout);
    try {
      results.push_back(run_upgrade(s, variant, self, run_flags));
    } catch (const std::exception& e) {
      upgrade_result r;
      r.variant = variant;
      r.problems.push_back(e.what());
      results.push_back(std::move(r));
    }
    const auto& r = results.back();
    if (!r.problems.empty()) continue;
    for (const auto& n : r.nodes) {
      auto at = [&](std::optional<std::uint64_t> t) {
        return t ? fmt::format("{:+.3f}", rel_s(*t, r.t0_us)) : std::string("-");
      };
      fmt::print(
          "  {}: reboot {}, reboot.target {}, LB down {}, booted {}, ready {}, LB up {} "
          "(out of the LB {:.1f} s)\n",
          n.name, at(n.reboot_requested), at(n.reboot_target), at(n.lb_down), at(n.booted),
          at(n.ready), at(n.lb_up), n.out_of_lb_s());
    }
    fmt::print(
        "  {} requests, {} failed; agent errors {} naive, {} retry (lost to the idle close {} "
        "naive, {} retry); Degraded {} naive, {} retry\n",
        r.sampler.size(), r.failed(), r.agent_errors(agent_policy::naive),
        r.agent_errors(agent_policy::retry), r.idle_close_losses(agent_policy::naive),
        r.idle_close_losses(agent_policy::retry), r.degraded(agent_policy::naive),
        r.degraded(agent_policy::retry));
    if (!r.go_agents.empty()) {
      fmt::print("  client-go agents (failed of requests / Degraded): naive {}, retrying {}\n",
                 e2e::go_agents_text(r.go_agents, "naive"),
                 e2e::go_agents_text(r.go_agents, "retry"));
    }
    const fs::path out = s.out_dir / variant;
    e2e::write_records_csv(out / "requests.csv", r.sampler, r.t0_us);
    std::uint64_t end_us = r.t0_us;
    for (const auto& q : r.sampler) end_us = std::max(end_us, q.send_us + q.latency_us);
    write_timeline_data(out, r, end_us);
  }
  const std::string summary = table(s, results);
  fmt::print("\n{}", summary);
  std::ofstream(s.out_dir / "rolling-upgrade.md", std::ios::trunc) << summary;
  std::ofstream(s.out_dir / "rolling-upgrade.gp", std::ios::trunc) << gnuplot_script(results);

  bool ok = true;
  for (const auto& r : results) {
    if (!r.problems.empty()) {
      fmt::print("FAIL rolling-upgrade {}: the upgrade did not run: {}\n", r.variant,
                 r.problems.front());
      ok = false;
    } else if (s.check) {
      ok = check(s, r) && ok;
    } else {
      for (const auto& v : r.order_violations) {
        fmt::print("FAIL rolling-upgrade {}: {}\n", r.variant, v);
        ok = false;
      }
    }
  }
  sandbox::reap_orphans();
  return ok ? 0 : 1;
}
