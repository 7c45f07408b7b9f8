// The end-to-end disruption test: clients behind a real HAProxy while a sandboxed control-plane
// node reboots, without and with shutdown-shim, in one run. scripts/e2e-disruption runs it by
// hand and draws the timeline; the meson suite "e2e" runs the default scenarios with --check.
//
// Each scenario builds two nodes. Node A (in this process) and node B (a child process running
// this binary with --serve-node, since a node_sandbox owns its process's DBUS_SYSTEM_BUS_ADDRESS)
// each have a private dbus-daemon, the real systemd-logind, the stand-in PID 1 manager, a stand-in
// kube-apiserver and, in the shim scenarios, a shutdown-shim. HAProxy balances the two; a load
// client sends through it for the whole scenario and records every request. Everything runs in a
// private network namespace: its loopback, ports and HAProxy touch nothing of the machine's.
//
// The apiserver-crash and apiserver-hang scenarios break node A's apiserver without a reboot
// (SIGKILL, then a restart 5 s later; SIGSTOP for 10 s, then SIGCONT), each with a shim on both
// nodes: a baseline shim without the target and upstream checks (the behaviour before issue 9:
// /readyz knew only shutdowns), and one with them. --check wants failed requests in the baseline,
// fewer with the checks, and none with the checks among requests sent after the detection window.
//
// The shim-gns scenarios (issue 13) add to node A kubelet's graceful node shutdown: the stand-in
// kubelet (tests/sandbox/fake_kubelet) holds its own delay lock and, the kube-apiserver static pod
// having no priority, SIGTERMs the apiserver itself at the very start of the shutdown. With the
// shim attached as before (shim-gns-naive) the apiserver gets kubelet's SIGTERM and the shim's, and
// exits at once on the second: --check wants failed requests there. With the node set up as
// docs/install.md says and the shim given kubelet's files, as its unit does by default (shim-gns:
// --kubelet-config and --static-pod-manifest), the shim sends nothing and counts kubelet's signal
// as its own: --check wants one SIGTERM, exit 0 and no failure. shim-gns-priority (issue 19) is the
// same with kubeadm's current manifest (priority 2000001000, as OpenShift's): kubelet's critical
// group, whose SIGTERM comes after the other group's grace (scaled down to 3 s); the shim, unready
// from +0, leaves the signal to kubelet all the same: the same criterion.
//
// Exit status: 0 all scenarios ran (and, with --check, met the pass criterion), 1 otherwise,
// 2 usage, 77 cannot run here (not root, no haproxy) unless CI=true.

#include <fcntl.h>
#include <fmt/core.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "e2e_common.hpp"
#include "haproxy.hpp"
#include "http_probe.hpp"
#include "load_client.hpp"
#include "node_sandbox.hpp"
#include "process.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using e2e::apiserver_argv;
using e2e::flag;
using e2e::next_service_port;
using e2e::parse_seconds;
using e2e::read_first_line;
using e2e::read_pid;
using e2e::ready_200;
using e2e::seconds;
using e2e::shim_argv;
using e2e::sleep_s;
using e2e::wait_until;

// --- settings -----------------------------------------------------------------------------------

struct settings : e2e::common_settings {
  double stop_timeout_s = 0;  // baseline-apiserver-delay: systemd's stop timeout; 0: 90/70 x drain
  // shim-drill: the drill's length; long enough for HAProxy's fall x inter, and more.
  double drill_s = 6;
  // apiserver-crash: the restart's delay after the SIGKILL; apiserver-hang: the SIGSTOP's length.
  double restart_after_s = 5;
  double hang_s = 10;
  // apiserver-hang: a client's request timeout. A hung server answers everything at SIGCONT, so a
  // client that waits for ever sees a slow request, never a failure; one with a timeout shorter
  // than the hang (kubectl --request-timeout, a controller's context) sees the outage.
  double hang_request_timeout_s = 2;
  // The shim's upstream check in the shim-apiserver-* scenarios (its defaults).
  double upstream_interval_s = 1;
  double upstream_timeout_s = 1;
  unsigned upstream_fall = 3;
  std::string lb_mode = "tcp";
  unsigned lb_retries = 1;
  std::vector<std::string> scenarios;
};

const std::vector<std::string> kAllScenarios = {"baseline-no-signal",
                                                "baseline-apiserver-delay",
                                                "shim-attach",
                                                "shim-wrapper",
                                                "shim-cancel",
                                                "shim-gns-naive",
                                                "shim-gns",
                                                "shim-gns-priority",
                                                "baseline-apiserver-crash",
                                                "shim-apiserver-crash",
                                                "baseline-apiserver-hang",
                                                "shim-apiserver-hang",
                                                "shim-drill"};

bool is_crash_scenario(const std::string& s) { return s.ends_with("-apiserver-crash"); }
bool is_hang_scenario(const std::string& s) { return s.ends_with("-apiserver-hang"); }
// The apiserver breaks while the node stays up: no reboot.
bool is_fault_scenario(const std::string& s) { return is_crash_scenario(s) || is_hang_scenario(s); }
// A reboot scenario with the shim, or a fault scenario with the target and upstream checks.
bool is_shim_scenario(const std::string& s) { return s.starts_with("shim-"); }
// Whether the nodes run a shim (the fault baselines run one without the checks).
bool runs_shim(const std::string& s) { return is_shim_scenario(s) || is_fault_scenario(s); }
// Node A runs the stand-in kubelet with graceful node shutdown (issue 13).
bool runs_kubelet(const std::string& s) { return s.starts_with("shim-gns"); }
// `shutdown-shim drill` on node A instead of a reboot (issue 23).
bool is_drill_scenario(const std::string& s) { return s == "shim-drill"; }
// A reboot scenario whose setup is known to fail clients: --check wants failed requests, or the
// test could not tell the shim's effect from luck.
bool must_fail(const std::string& s) { return s == "baseline-no-signal" || s == "shim-gns-naive"; }

[[noreturn]] void usage(const std::string& error) {
  fmt::print(
      stderr,
      "e2e_disruption: {}\n"
      "usage: e2e_disruption [--drain=3s] [--exit-timeout=10s] [--stop-timeout=DUR]\n"
      "  [--inter=1s] [--fall=2] [--rise=2] [--rate=200] [--request-time=15ms]\n"
      "  [--lead=2s] [--tail=2s] [--request-timeout=10s] [--restart-after=5s] [--hang=10s]\n"
      "  [--hang-request-timeout=2s]\n"
      "  [--lb-mode=tcp|http] [--lb-retries=1] [--out-dir=DIR] [--scenario=NAME]... [--check]\n"
      "scenarios: baseline-no-signal baseline-apiserver-delay shim-attach shim-wrapper "
      "shim-cancel\n"
      "  shim-gns-naive shim-gns shim-gns-priority baseline-apiserver-crash shim-apiserver-crash\n"
      "  baseline-apiserver-hang shim-apiserver-hang shim-drill\n",
      error);
  std::exit(2);
}

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    try {
      if (e2e::parse_common_flag(a, s)) {
        continue;
      } else if (auto v = flag(a, "--stop-timeout")) {
        s.stop_timeout_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--restart-after")) {
        s.restart_after_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--hang")) {
        s.hang_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--hang-request-timeout")) {
        s.hang_request_timeout_s = parse_seconds(*v);
      } else if (auto v = flag(a, "--lb-mode")) {
        if (*v != "tcp" && *v != "http") usage("--lb-mode is tcp or http");
        s.lb_mode = *v;
      } else if (auto v = flag(a, "--lb-retries")) {
        s.lb_retries = static_cast<unsigned>(std::stoul(*v));
      } else if (auto v = flag(a, "--scenario")) {
        if (std::find(kAllScenarios.begin(), kAllScenarios.end(), *v) == kAllScenarios.end())
          usage("unknown scenario " + *v);
        s.scenarios.push_back(*v);
      } else {
        usage(fmt::format("unknown argument '{}'", a));
      }
    } catch (const std::invalid_argument& e) {
      usage(fmt::format("bad value in '{}': {}", a, e.what()));
    }
  }
  if (s.scenarios.empty()) s.scenarios = kAllScenarios;
  if (s.stop_timeout_s == 0) s.stop_timeout_s = s.drain_s * 90.0 / 70.0;
  if (s.rate <= 0 || s.fall == 0 || s.rise == 0) usage("rate, fall and rise must be positive");
  if (s.request_timeout_s <= 0 || s.hang_request_timeout_s <= 0)
    usage("request timeouts must be positive");
  return s;
}

// The upstream check of the shim-apiserver-* scenarios, on node A's plain-HTTP stand-in.
std::vector<std::string> upstream_flags(std::uint16_t api_port, const settings& s) {
  return {fmt::format("--upstream-readyz=http://127.0.0.1:{}/readyz", api_port),
          "--upstream-interval=" + seconds(s.upstream_interval_s),
          "--upstream-timeout=" + seconds(s.upstream_timeout_s),
          fmt::format("--upstream-fall={}", s.upstream_fall)};
}

// Fault scenarios: how long after the fault node A may still get requests with the checks on.
// The shim's 503 comes at once for a crash (its pidfd), after `fall` failed probes for a hang
// (each within interval + timeout of the one before); then HAProxy takes `fall` checks `inter`
// apart. Half a second more for a loaded machine.
double detection_window_s(const settings& s, const std::string& name) {
  const double shim =
      is_hang_scenario(name) ? s.upstream_fall * (s.upstream_interval_s + s.upstream_timeout_s) : 0;
  return shim + parse_seconds(s.inter) * s.fall + 0.5;
}

// --- the stand-in kubelet (shim-gns scenarios) -------------------------------------------------

// kubelet's path to the runtime for the first priority group, where a static pod without
// `priority` falls: pod worker, CRI StopContainer, the runtime's kill (the trial used
// 0.3 s, as tests/integration/test_shim_kubelet.cpp does). Not 0: two SIGTERMs sent 0.4 ms apart
// reached fake_apiserver as one (the kernel merges a pending signal with a second), which would
// hide shim-gns-naive's double signal by luck.
constexpr double kKubeletFirstGroupDelayS = 0.3;
// shim-gns-priority: the non-critical group's whole grace before the critical group's turn (MCO's
// 90 s / 60 s on a two-node OpenShift gives it 30 s; scaled down), the longest kubelet takes.
constexpr long long kKubeletNormalGroupS = 3;

// The apiserver's grace in kubelet's whole seconds: at least the drain and the exit timeout, so
// that kubelet's SIGKILL cuts neither, and at least the pod's own (the API's 30 s default where
// the manifest says none, as kubeadm's current one), which a shorter group grace would cut.
long long kubelet_grace_s(const settings& s, const std::string& scenario) {
  const long long hold = std::llround(std::ceil(s.drain_s + s.exit_timeout_s));
  return scenario == "shim-gns-priority" ? std::max(hold, 30LL) : hold;
}

// When the stand-in's SIGTERM comes: at once for a static pod in kubelet's first group, after the
// lower group's grace for one in the critical group.
double kubelet_sigterm_delay_s(const std::string& scenario) {
  return scenario == "shim-gns-priority" ? static_cast<double>(kKubeletNormalGroupS)
                                         : kKubeletFirstGroupDelayS;
}

std::vector<std::string> kubelet_argv(const std::string& binary, const std::string& bus_address,
                                      const fs::path& api_pidfile, const fs::path& log,
                                      const settings& s, const std::string& scenario) {
  // Attach mode: the apiserver is the container's PID 1, the process the runtime signals.
  return {binary,
          "--address=" + bus_address,
          "--target-pidfile=" + api_pidfile.string(),
          "--sigterm-delay=" + seconds(kubelet_sigterm_delay_s(scenario)),
          fmt::format("--grace={}s", kubelet_grace_s(s, scenario)),
          "--log=" + log.string()};
}

// The node's files set up as docs/install.md says ("On a node with kubelet's graceful node
// shutdown"): kubeadm's kube-apiserver manifest (priorityClassName, which kubelet cannot resolve
// for a static pod, and no `priority`) with a termination grace of drain + exit timeout, and
// kubelet's configuration whose group for priority 0, where the static pod falls, is as long. The
// system-critical group has kubelet's common 10 s: kubelet's total stays within the sandbox's
// InhibitDelayMaxSec (drain + exit timeout + 30 s). Both files say what the stand-in does: SIGTERM
// at the start, SIGKILL after kubelet_grace_s.
void write_kubelet_files(const fs::path& config, const fs::path& manifest, const settings& s) {
  const long long grace = kubelet_grace_s(s, "shim-gns");
  std::ofstream(config, std::ios::trunc) << fmt::format(
      "apiVersion: kubelet.config.k8s.io/v1beta1\n"
      "kind: KubeletConfiguration\n"
      "shutdownGracePeriodByPodPriority:\n"
      "  - priority: 0\n"
      "    shutdownGracePeriodSeconds: {}\n"
      "  - priority: 2000000000\n"
      "    shutdownGracePeriodSeconds: 10\n",
      grace);
  std::ofstream(manifest, std::ios::trunc) << fmt::format(
      "apiVersion: v1\n"
      "kind: Pod\n"
      "metadata:\n"
      "  name: kube-apiserver\n"
      "  namespace: kube-system\n"
      "  labels:\n"
      "    component: kube-apiserver\n"
      "    tier: control-plane\n"
      "spec:\n"
      "  containers:\n"
      "  - name: kube-apiserver\n"
      "    image: registry.k8s.io/kube-apiserver:v1.35.0\n"
      "    command:\n"
      "    - kube-apiserver\n"
      "    - --shutdown-delay-duration={}\n"
      "  hostNetwork: true\n"
      "  priorityClassName: system-node-critical\n"
      "  terminationGracePeriodSeconds: {}\n",
      seconds(s.drain_s), grace);
}

// shim-gns-priority's files: kube-apiserver's manifest as kubeadm v1.31 writes it (`priority:
// 2000001000` next to the class name, no terminationGracePeriodSeconds: the API's 30 s), and the
// two periods (shutdownGracePeriod, shutdownGracePeriodCriticalPods) whose critical group, where
// that priority falls, gets the pod's grace after the other group's kKubeletNormalGroupS. Both say
// what the stand-in does: SIGTERM at +0..+3 s, SIGKILL after kubelet_grace_s.
void write_kubelet_priority_files(const fs::path& config, const fs::path& manifest,
                                  const settings& s) {
  const long long critical = kubelet_grace_s(s, "shim-gns-priority");
  std::ofstream(config, std::ios::trunc) << fmt::format(
      "apiVersion: kubelet.config.k8s.io/v1beta1\n"
      "kind: KubeletConfiguration\n"
      "shutdownGracePeriod: {}s\n"
      "shutdownGracePeriodCriticalPods: {}s\n",
      kKubeletNormalGroupS + critical, critical);
  std::ofstream(manifest, std::ios::trunc) << fmt::format(
      "apiVersion: v1\n"
      "kind: Pod\n"
      "metadata:\n"
      "  annotations:\n"
      "    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 127.0.0.1:6443\n"
      "  creationTimestamp: null\n"
      "  labels:\n"
      "    component: kube-apiserver\n"
      "    tier: control-plane\n"
      "  name: kube-apiserver\n"
      "  namespace: kube-system\n"
      "spec:\n"
      "  containers:\n"
      "  - command:\n"
      "    - kube-apiserver\n"
      "    - --shutdown-delay-duration={}\n"
      "    image: registry.k8s.io/kube-apiserver:v1.31.2\n"
      "    imagePullPolicy: IfNotPresent\n"
      "    name: kube-apiserver\n"
      "  hostNetwork: true\n"
      "  priority: 2000001000\n"
      "  priorityClassName: system-node-critical\n"
      "  securityContext:\n"
      "    seccompProfile:\n"
      "      type: RuntimeDefault\n"
      "status: {{}}\n",
      seconds(s.drain_s));
}

bool has_timed_line(const fs::path& log, const std::string& word) {
  const auto lines = sandbox::read_timed_lines(log);
  return std::any_of(lines.begin(), lines.end(), [&](const auto& l) { return l.word == word; });
}

// Its lock is listed and it listens for PrepareForShutdown (it takes the lock first, as kubelet
// does: a reboot in between would go unseen).
bool wait_kubelet_watching(sandbox::node_sandbox& node, sandbox::child_process& kubelet,
                           const fs::path& log) {
  return node.wait_for_inhibitor_of("kubelet", kubelet.pid(), 30s) &&
         wait_until([&] { return has_timed_line(log, "WATCHING") || !kubelet.running(); }, 30s) &&
         kubelet.running();
}

// --- node B: a node that stays up
// -----------------------------------------------------------------

// `--serve-node --dir=D --name=N --api-port=P [--shim-port=Q --drain=..]`: builds the node (its
// sandbox directory named in D/N.dir), writes D/N.ready, and runs until SIGTERM (the termination
// cleanup kills its processes and removes its sandbox directory).
int serve_node(int argc, char** argv) {
  fs::path dir;
  std::string name;
  std::uint16_t api_port = 0, shim_port = 0;
  settings s;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (auto v = flag(a, "--dir"))
      dir = *v;
    else if (auto v = flag(a, "--name"))
      name = *v;
    else if (auto v = flag(a, "--api-port"))
      api_port = static_cast<std::uint16_t>(std::stoul(*v));
    else if (auto v = flag(a, "--shim-port"))
      shim_port = static_cast<std::uint16_t>(std::stoul(*v));
    else if (auto v = flag(a, "--drain"))
      s.drain_s = parse_seconds(*v);
    else if (auto v = flag(a, "--exit-timeout"))
      s.exit_timeout_s = parse_seconds(*v);
    else if (auto v = flag(a, "--request-time"))
      s.request_time_s = parse_seconds(*v);
  }
  sandbox::sandbox_options so;
  so.inhibit_delay_max = fmt::format("{}", std::llround(s.drain_s + s.exit_timeout_s + 30));
  sandbox::node_sandbox node(so);
  std::ofstream(dir / (name + ".dir")) << node.dir().string() << "\n";
  node.spawn("kube-apiserver", apiserver_argv(node.tools().fake_apiserver, name, api_port,
                                              node.dir(), s.drain_s, s.request_time_s));
  bool ok = wait_until([&] { return read_pid(node.dir() / (name + ".pid")).has_value(); }, 20s);
  if (ok && shim_port) {
    auto argv_shim = shim_argv(node.tools().shim, shim_port, s.drain_s, s.exit_timeout_s,
                               node.dir() / "shim-events.jsonl");
    argv_shim.push_back("--target-pidfile=" + (node.dir() / (name + ".pid")).string());
    node.spawn("shutdown-shim", argv_shim);
    ok = wait_until([&] { return ready_200(shim_port); }, 30s, 50ms);
  }
  if (!ok) {
    node.dump_logs(std::cerr);
    return 1;
  }
  std::ofstream(dir / (name + ".ready")) << "ready\n";
  for (;;) pause();  // SIGTERM is taken by the termination cleanup thread
}

// --- results
// --------------------------------------------------------------------------------------

struct marker {
  std::string name;
  std::uint64_t usec;
};

struct scenario_result {
  std::string name;
  std::vector<e2e::request_record> records;
  std::vector<marker> markers;
  std::uint64_t t0_us = 0;  // the reboot request
  std::optional<double> unready_to_lb_down_ms;
  std::optional<double> hold_s;
  std::size_t node_a_answers_after_cancel = 0;
  // Reboot scenarios: the SIGTERMs node A's apiserver logged, and its exit code ("-" when the
  // reboot's SIGKILL ended it).
  std::optional<std::size_t> apiserver_sigterms;
  std::string apiserver_exit = "-";
  // Fault scenarios: the detection window (from t0, the fault) and the failed requests sent after
  // it.
  std::optional<double> detection_window_s;
  std::size_t failed_after_window = 0;
  // The drill scenario: what the drill measured (its JSON result; offsets from the drill's start),
  // and HAProxy's own DOWN and UP of node A from the same moment, all in seconds.
  struct drill_figures {
    int exit_code = -1;
    std::string summary;
    std::optional<double> checkers_fell_s;     // the last checker's fall-th 503 in a row
    std::optional<double> lb_down_s;           // HAProxy: node A DOWN
    std::optional<double> lb_up_s;             // HAProxy: node A UP again
    std::optional<double> connections_zero_s;  // new connections to node A's apiserver fell to 0
    std::string connections;                   // the series, per second
  };
  std::optional<drill_figures> drill;
  std::vector<std::string> problems;  // the run itself went wrong (not a measured failure)

  std::size_t failed() const {
    return static_cast<std::size_t>(
        std::count_if(records.begin(), records.end(), [](const auto& r) { return r.failed(); }));
  }
  std::size_t retried() const {
    return static_cast<std::size_t>(
        std::count_if(records.begin(), records.end(), [](const auto& r) { return r.retried; }));
  }
  // From the first failed request's send to the last one's end.
  double failure_window_ms() const {
    std::optional<std::uint64_t> first, last;
    for (const auto& r : records) {
      if (!r.failed()) continue;
      if (!first || r.send_us < *first) first = r.send_us;
      if (!last || r.send_us + r.latency_us > *last) last = r.send_us + r.latency_us;
    }
    return first ? static_cast<double>(*last - *first) / 1e3 : 0;
  }
  // The longest stretch of consecutive failed requests (both streams, by send time), from the
  // first one's send to the last one's end.
  double longest_failure_run_ms() const {
    auto sorted = records;
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.send_us < b.send_us; });
    double best = 0;
    std::optional<std::uint64_t> run_start;
    for (const auto& r : sorted) {
      if (!r.failed()) {
        run_start.reset();
        continue;
      }
      if (!run_start) run_start = r.send_us;
      best = std::max(best, static_cast<double>(r.send_us + r.latency_us - *run_start) / 1e3);
    }
    return best;
  }
};

std::optional<std::uint64_t> lifecycle_at(const fs::path& log, const std::string& word) {
  for (const auto& l : sandbox::read_timed_lines(log)) {
    if (l.word == word) return l.usec;
  }
  return std::nullopt;
}

// --- one scenario
// ---------------------------------------------------------------------------------

scenario_result run_scenario(const settings& s, const std::string& name, const fs::path& self) {
  scenario_result res;
  res.name = name;
  const fs::path out = s.out_dir / name;
  fs::create_directories(out);
  const bool shim = runs_shim(name);
  const double hold_bound_s = s.drain_s + s.exit_timeout_s + 30;

  sandbox::sandbox_options so;
  so.inhibit_delay_max = fmt::format("{}", std::llround(hold_bound_s));
  sandbox::node_sandbox a(so);
  const auto tools = a.tools();

  const std::uint16_t fe_port = next_service_port();
  const std::uint16_t a_api = next_service_port();
  const std::uint16_t a_shim = next_service_port();
  const std::uint16_t b_api = next_service_port();
  const std::uint16_t b_shim = next_service_port();

  // Node B, in its own process.
  std::error_code ec;
  fs::remove(out / "node-b.ready", ec);
  fs::remove(out / "node-b.dir", ec);
  std::vector<std::string> b_argv = {self.string(),
                                     "--serve-node",
                                     "--dir=" + out.string(),
                                     "--name=node-b",
                                     fmt::format("--api-port={}", b_api),
                                     "--drain=" + seconds(s.drain_s),
                                     "--exit-timeout=" + seconds(s.exit_timeout_s),
                                     "--request-time=" + seconds(s.request_time_s)};
  if (shim) b_argv.push_back(fmt::format("--shim-port={}", b_shim));
  sandbox::spawn_options bo;
  for (char** e = environ; e && *e; ++e) bo.env.emplace_back(*e);
  bo.stdout_path = out / "node-b.log";
  sandbox::child_process node_b("node-b", b_argv, bo);
  // Stopped with SIGTERM, node B removes its own sandbox directory; killed, it cannot, so the
  // directory (named in node-b.dir) is removed here, or by this process's termination cleanup.
  struct node_b_stopper {
    sandbox::child_process& process;
    fs::path dir_file;
    ~node_b_stopper() { e2e::stop_node_process(process, dir_file); }
  } stop_node_b{node_b, out / "node-b.dir"};

  // Node A's apiserver (and shim).
  const fs::path pidfile = a.dir() / "node-a.pid";
  const fs::path signal_log = a.dir() / "node-a-signals.log";
  const fs::path lifecycle_log = a.dir() / "node-a-lifecycle.log";
  const fs::path event_log = a.dir() / "shim-events.jsonl";
  const fs::path kubelet_log = a.dir() / "kubelet.log";
  const fs::path kubelet_config = a.dir() / "kubelet-config.yaml";
  const fs::path static_pod_manifest = a.dir() / "kube-apiserver.yaml";
  const auto api_argv =
      apiserver_argv(tools.fake_apiserver, "node-a", a_api, a.dir(), s.drain_s, s.request_time_s);
  sandbox::child_process* shim_process = nullptr;
  sandbox::child_process* api_process = nullptr;  // null in wrapper mode
  sandbox::child_process* kubelet = nullptr;      // the shim-gns scenarios'
  auto fail = [&](const std::string& why) {
    res.problems.push_back(why);
    std::ostringstream logs;
    a.dump_logs(logs, 40);
    std::cerr << "scenario " << name << ": " << why << "\n" << logs.str();
    return res;
  };
  if (name == "shim-wrapper") {
    auto argv = shim_argv(tools.shim, a_shim, s.drain_s, s.exit_timeout_s, event_log);
    argv.push_back("--");
    argv.insert(argv.end(), api_argv.begin(), api_argv.end());
    shim_process = &a.spawn("shutdown-shim", argv);
  } else {
    api_process = &a.spawn("kube-apiserver", api_argv);
    // kubelet, which runs the static pod, holds its lock before the shim starts.
    if (runs_kubelet(name)) {
      kubelet = &a.spawn("fake-kubelet", kubelet_argv(tools.fake_kubelet, a.bus_address(), pidfile,
                                                      kubelet_log, s, name));
      if (!wait_kubelet_watching(a, *kubelet, kubelet_log))
        return fail("node A's kubelet did not take its lock");
    }
    if (shim) {
      auto argv = shim_argv(tools.shim, a_shim, s.drain_s, s.exit_timeout_s, event_log);
      // The fault baselines run the shim as it was before issue 9: no target, no upstream check.
      if (is_shim_scenario(name)) argv.push_back("--target-pidfile=" + pidfile.string());
      if (name == "shim-gns" || name == "shim-gns-priority") {
        if (name == "shim-gns") {
          write_kubelet_files(kubelet_config, static_pod_manifest, s);
        } else {
          write_kubelet_priority_files(kubelet_config, static_pod_manifest, s);
        }
        argv.push_back("--kubelet-config=" + kubelet_config.string());
        argv.push_back("--static-pod-manifest=" + static_pod_manifest.string());
      }
      if (is_shim_scenario(name) && (is_fault_scenario(name) || is_drill_scenario(name))) {
        for (auto& f : upstream_flags(a_api, s)) argv.push_back(std::move(f));
      }
      if (is_drill_scenario(name)) {
        fs::create_directories(a.dir() / "runtime");
        argv.push_back("--state-dir=" + (a.dir() / "runtime").string());
      }
      shim_process = &a.spawn("shutdown-shim", argv);
    }
  }
  if (!wait_until([&] { return read_pid(pidfile).has_value(); }, 20s))
    return fail("node A's apiserver did not start");
  if (shim && (!wait_until([&] { return ready_200(a_shim); }, 30s, 50ms) ||
               !a.wait_for_inhibitor("shutdown-shim", true, 30s)))
    return fail("node A's shim did not become ready with its lock");
  if (!wait_until([&] { return fs::exists(out / "node-b.ready") || !node_b.running(); }, 60s) ||
      !node_b.running())
    return fail("node B did not come up (see node-b.log)");
  sandbox::register_cleanup_dir(read_first_line(out / "node-b.dir"));

  // The load balancer.
  e2e::lb_options lo;
  lo.mode = s.lb_mode;
  lo.inter = s.inter;
  lo.fall = s.fall;
  lo.rise = s.rise;
  // The apiserver-crash pair runs without retries: HAProxy's redispatch sends a connection refused
  // by the dead port to node B at once, which hides the crash from clients in both variants but
  // for the requests in flight at the SIGKILL (measured: 1 failed request in the baseline, 2 with
  // the checks). Load balancers without it (cloud NLBs; unit-files/haproxy/haproxy.cfg, whose
  // retries go to the same server) send clients to the dead port until their checks notice.
  lo.retries = is_crash_scenario(name) ? 0 : s.lb_retries;
  lo.frontend_port = fe_port;
  lo.servers = {{"node-a", a_api, shim ? a_shim : a_api}, {"node-b", b_api, shim ? b_shim : b_api}};
  e2e::haproxy lb(s.haproxy, out, lo);
  // Both nodes answer through it before anything happens.
  std::set<std::string> seen;
  wait_until(
      [&] {
        sandbox::http_client c(fe_port);
        auto r = c.get("/version", 1000ms);
        if (r.ok && r.status == 200) seen.insert(r.backend);
        return seen.size() == 2;
      },
      20s, 20ms);
  if (seen.size() != 2) return fail("the load balancer does not reach both nodes");

  // The run.
  const double timeout_s = is_hang_scenario(name) ? s.hang_request_timeout_s : s.request_timeout_s;
  e2e::load_client load({.port = fe_port,
                         .target = "/version",
                         .rate = s.rate,
                         .timeout = std::chrono::milliseconds(std::llround(timeout_s * 1000))});
  sleep_s(s.lead_s);
  const pid_t api_pid = *read_pid(pidfile);
  const auto lb_bound = std::chrono::milliseconds(
      std::llround((parse_seconds(s.inter) * (s.fall + s.rise + 2) + 10) * 1000));
  std::uint64_t last_event = 0;
  if (is_drill_scenario(name)) {
    // The drill waits for its end and prints its result as JSON.
    res.t0_us = sandbox::monotonic_us();
    res.markers.push_back({"drill requested", res.t0_us});
    sandbox::spawn_options dopt;
    for (char** e = environ; e && *e; ++e) dopt.env.emplace_back(*e);
    dopt.stdout_path = out / "drill.json";
    dopt.stderr_path = out / "drill.err";
    fs::remove(dopt.stdout_path, ec);
    sandbox::child_process drill("shutdown-shim-drill",
                                 {tools.shim, "drill", "--duration=" + seconds(s.drill_s),
                                  fmt::format("--lb-fall={}", s.fall), "--json",
                                  "--state-dir=" + (a.dir() / "runtime").string()},
                                 dopt);
    const auto status =
        drill.wait_for_exit(std::chrono::milliseconds(std::llround((s.drill_s + 30) * 1000)));
    if (!status) return fail("the drill did not end");
    scenario_result::drill_figures d;
    d.exit_code = sandbox::shell_exit_code(*status);
    const std::string json = sandbox::read_text_file(out / "drill.json");
    d.summary = sandbox::json_string_field(json, "summary").value_or(json);
    const auto ms = [&](std::string_view key) -> std::optional<double> {
      const auto v = sandbox::json_string_field(json, key);
      if (!v || v->empty()) return std::nullopt;
      return std::stod(*v) / 1e3;
    };
    d.checkers_fell_s = ms("lb_fell_ms");
    d.connections_zero_s = ms("lb_connections_zero_ms");
    d.connections = sandbox::json_string_field(json, "lb_new_connections_series").value_or("");
    // Offsets from the shim's own unready moment, the drill's start.
    std::uint64_t started = res.t0_us;
    for (const auto& e : sandbox::read_event_log(event_log)) {
      if (e.event == "DrillStarted") started = e.monotonic_us;
    }
    res.markers.push_back({"shim unready (drill)", started});
    const auto down = lb.first("node-a", "DOWN", res.t0_us);
    if (down) d.lb_down_s = (static_cast<double>(*down) - static_cast<double>(started)) / 1e6;
    if (down &&
        wait_until([&] { return lb.first("node-a", "UP", *down).has_value(); }, lb_bound + 30s)) {
      const auto up = *lb.first("node-a", "UP", *down);
      d.lb_up_s = (static_cast<double>(up) - static_cast<double>(started)) / 1e6;
      last_event = up;
      res.markers.push_back({"LB marks node up", up});
    } else {
      last_event = sandbox::monotonic_us();
    }
    res.drill = d;
  } else if (is_fault_scenario(name)) {
    res.t0_us = sandbox::monotonic_us();
    if (is_crash_scenario(name)) {
      api_process->signal(SIGKILL);
      res.markers.push_back({"SIGKILL apiserver", res.t0_us});
      sleep_s(s.restart_after_s);
      // As kubelet restarts a static pod: the same port and pidfile (the stale one gone first).
      std::filesystem::remove(pidfile, ec);
      a.spawn("kube-apiserver-restarted", api_argv);
      last_event = sandbox::monotonic_us();
      res.markers.push_back({"apiserver restarted", last_event});
    } else {
      api_process->signal(SIGSTOP);
      res.markers.push_back({"SIGSTOP apiserver", res.t0_us});
      sleep_s(s.hang_s);
      api_process->signal(SIGCONT);
      last_event = sandbox::monotonic_us();
      res.markers.push_back({"SIGCONT apiserver", last_event});
    }
    res.detection_window_s = detection_window_s(s, name);
    if (const auto down = lb.first("node-a", "DOWN", res.t0_us)) {
      if (!wait_until([&] { return lb.first("node-a", "UP", *down).has_value(); }, lb_bound + 30s))
        return fail("node A did not rejoin the load balancer after the fault");
      last_event = *lb.first("node-a", "UP", *down);
      res.markers.push_back({"LB marks node up", last_event});
    } else if (is_shim_scenario(name)) {
      return fail("the load balancer never marked node A down, with the checks on");
    }
  } else {
    if (name == "baseline-no-signal") {
      a.set_kill_on_reboot({api_pid});
    } else if (name == "baseline-apiserver-delay") {
      a.set_stop_on_reboot({api_pid},
                           std::chrono::microseconds(std::llround(s.stop_timeout_s * 1e6)));
    } else if (kubelet) {
      a.set_kill_on_reboot({api_pid, shim_process->pid(), kubelet->pid()});
    } else if (name != "shim-cancel") {
      a.set_kill_on_reboot({api_pid, shim_process->pid()});
    }
    res.t0_us = a.reboot();
    res.markers.push_back({"reboot requested", res.t0_us});
    const auto start = a.wait_for_start_unit(
        "reboot.target", std::chrono::milliseconds(std::llround(hold_bound_s * 1000)), res.t0_us);
    if (!start) return fail("logind never started reboot.target");
    res.hold_s = static_cast<double>(start->usec - res.t0_us) / 1e6;
    res.markers.push_back({"reboot.target started", start->usec});

    last_event = start->usec;
    if (name == "shim-cancel") {
      // logind 252 offers no way to call off a delayed reboot before it starts reboot.target: the
      // earliest cancel is of that job, which makes logind send PrepareForShutdown(false).
      const auto before = a.prepare_for_shutdown_signals().size();
      a.cancel_last_job();
      const auto cancel_us = sandbox::monotonic_us();
      res.markers.push_back({"reboot cancelled", cancel_us});
      if (!a.wait_for_prepare_for_shutdown(false, 30s, before))
        return fail("no PrepareForShutdown(false) after the cancel");
      // The apiserver had its SIGTERM and is gone after its shutdown delay; kubelet starts it
      // again.
      if (!wait_until([&] { return lifecycle_at(lifecycle_log, "EXIT").has_value(); }, 30s))
        return fail("the apiserver did not exit after its shutdown delay");
      std::filesystem::remove(pidfile, ec);
      a.spawn("kube-apiserver-restarted", api_argv);
      if (!wait_until([&] { return lb.first("node-a", "UP", cancel_us).has_value(); },
                      lb_bound + 30s))
        return fail("node A did not rejoin the load balancer after the cancel");
      last_event = *lb.first("node-a", "UP", cancel_us);
      res.markers.push_back({"LB marks node up", last_event});
    } else {
      if (name == "baseline-apiserver-delay") {
        sleep_s(s.stop_timeout_s);
        if (!wait_until([&] { return !a.killed_on_reboot().empty(); }, 10s))
          return fail("the stand-in manager never killed the node");
      }
      if (!wait_until([&] { return lb.first("node-a", "DOWN", res.t0_us).has_value(); }, lb_bound))
        return fail("the load balancer never marked node A down");
    }
  }
  for (const auto& k : a.killed_on_reboot()) {
    const auto pid = static_cast<pid_t>(k.pid);
    const char* who = pid == api_pid                     ? "apiserver"
                      : kubelet && pid == kubelet->pid() ? "kubelet"
                                                         : "shim";
    if (k.was_alive) res.markers.push_back({fmt::format("SIGKILL {}", who), k.usec});
    last_event = std::max(last_event, k.usec);
  }
  if (auto down = lb.first("node-a", "DOWN", res.t0_us)) {
    res.markers.push_back({"LB marks node down", *down});
    last_event = std::max(last_event, *down);
  }
  const auto settle_until = last_event + static_cast<std::uint64_t>(s.tail_s * 1e6);
  while (sandbox::monotonic_us() < settle_until) std::this_thread::sleep_for(20ms);
  load.stop();
  res.records = load.records();
  lb.stop();

  // Markers from the node's own logs, all CLOCK_MONOTONIC.
  std::optional<std::uint64_t> unready;
  if (is_fault_scenario(name)) {
    for (const auto& e : sandbox::read_event_log(event_log)) {
      if (e.monotonic_us < res.t0_us) continue;
      if (e.event == "TargetLost" || e.event == "UpstreamFailed") {
        if (!unready) unready = e.monotonic_us;
      } else if (e.event != "TargetRunning" && e.event != "UpstreamPassed") {
        continue;
      }
      res.markers.push_back({"shim " + e.event, e.monotonic_us});
    }
    const auto window_end = res.t0_us + static_cast<std::uint64_t>(*res.detection_window_s * 1e6);
    res.failed_after_window = static_cast<std::size_t>(
        std::count_if(res.records.begin(), res.records.end(),
                      [&](const auto& r) { return r.failed() && r.send_us > window_end; }));
  } else if (shim && !is_drill_scenario(name)) {
    for (const auto& e : sandbox::read_event_log(event_log)) {
      if (e.event == "ShutdownInitiated" && !unready) unready = e.monotonic_us;
      // shim-gns*: the policy at work (kubelet's SIGTERM counted as the shim's).
      if (e.event == "SignalLeftToKubelet")
        res.markers.push_back({"shim " + e.event, e.monotonic_us});
    }
    if (unready) res.markers.push_back({"shim unready", *unready});
  } else if (auto u = lifecycle_at(lifecycle_log, "UNREADY")) {
    unready = u;
    res.markers.push_back({"apiserver unready", *u});
  }
  for (const auto& l : sandbox::read_timed_lines(signal_log)) {
    res.markers.push_back({"apiserver " + l.word, l.usec});
  }
  for (const auto& l : sandbox::read_timed_lines(lifecycle_log)) {
    if (l.word == "EXIT" || l.word == "STOPPED_LISTENING") {
      res.markers.push_back({"apiserver " + l.word, l.usec});
    }
  }
  if (!is_fault_scenario(name)) {
    const auto signals = sandbox::read_timed_lines(signal_log);
    res.apiserver_sigterms = static_cast<std::size_t>(std::count_if(
        signals.begin(), signals.end(), [](const auto& l) { return l.word == "SIGTERM"; }));
    for (const auto& l : sandbox::read_timed_lines(lifecycle_log)) {
      if (l.word == "EXIT") {
        res.apiserver_exit = l.detail;
        break;
      }
    }
  }
  // kubelet's signals to the apiserver, as the stand-in logs them ("SIGTERM pid").
  for (const auto& l : sandbox::read_timed_lines(kubelet_log)) {
    if (l.word == "SIGTERM" || l.word == "SIGKILL") {
      res.markers.push_back({"kubelet sends " + l.word, l.usec});
    }
  }
  const auto down = lb.first("node-a", "DOWN", res.t0_us);
  if (unready && down) res.unready_to_lb_down_ms = (static_cast<double>(*down) - *unready) / 1e3;
  if (name == "shim-cancel") {
    const auto cancel = std::find_if(res.markers.begin(), res.markers.end(),
                                     [](const marker& m) { return m.name == "reboot cancelled"; });
    for (const auto& r : res.records) {
      if (!r.failed() && r.backend == "node-a" && r.send_us > cancel->usec)
        ++res.node_a_answers_after_cancel;
    }
  }
  std::sort(res.markers.begin(), res.markers.end(),
            [](const marker& x, const marker& y) { return x.usec < y.usec; });

  // What stays: requests, markers, the logs of the node and the load balancer.
  e2e::write_records_csv(out / "requests.csv", res.records, res.t0_us);
  {
    std::ofstream m(out / "markers.tsv", std::ios::trunc);
    for (const auto& mk : res.markers) {
      m << fmt::format("{:.6f}\t{}\n",
                       (static_cast<double>(mk.usec) - static_cast<double>(res.t0_us)) / 1e6,
                       mk.name);
    }
  }
  for (const auto& f :
       {event_log, signal_log, lifecycle_log, kubelet_log, kubelet_config, static_pod_manifest})
    fs::copy_file(f, out / f.filename(), fs::copy_options::overwrite_existing, ec);
  for (const char* log :
       {"shutdown-shim", "systemd-logind", "fake-systemd-manager", "fake-kubelet"}) {
    fs::copy_file(a.log_path(log), out / (std::string("node-a-") + log + ".log"),
                  fs::copy_options::overwrite_existing, ec);
  }
  return res;
}

// --- reports
// --------------------------------------------------------------------------------------

std::string optional_ms(std::optional<double> v) {
  return v ? fmt::format("{:.0f}", *v) : std::string("-");
}

std::string table(const settings& s, const std::vector<scenario_result>& results) {
  std::string t = fmt::format(
      "HAProxy mode {}, {}, inter {} fall {} rise {}; drain and apiserver shutdown delay {} s; "
      "{} req/s on new connections, up to {} req/s on each of two keep-alive connections; "
      "{} ms per request; a request unanswered after {} s fails ({} s in the hang scenarios). "
      "Fault scenarios: SIGKILL and a restart {} s later, SIGSTOP for {} s; the checks' upstream "
      "probe every {} s, timeout {} s, fall {}; the apiserver-crash pair without LB retries\n\n",
      s.lb_mode,
      s.lb_retries ? fmt::format("retries {} with redispatch", s.lb_retries) : "no retries",
      s.inter, s.fall, s.rise, s.drain_s, s.rate, s.rate, s.request_time_s * 1e3,
      s.request_timeout_s, s.hang_request_timeout_s, s.restart_after_s, s.hang_s,
      s.upstream_interval_s, s.upstream_timeout_s, s.upstream_fall);
  t += "| scenario | requests | failed | failed by kind | longest failure run (ms) | "
       "first to last failure (ms) | unready to LB down (ms) | reboot hold (s) | "
       "retried on a fresh conn | failed after the detection window | apiserver SIGTERMs | "
       "apiserver exit |\n";
  t += "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& r : results) {
    const std::string kinds = r.problems.empty() ? e2e::failed_by_kind_text(r.records)
                                                 : "RUN FAILED: " + r.problems.front();
    t += fmt::format(
        "| {} | {} | {} | {} | {:.0f} | {:.0f} | {} | {} | {} | {} | {} | {} |\n", r.name,
        r.records.size(), r.failed(), kinds, r.longest_failure_run_ms(), r.failure_window_ms(),
        optional_ms(r.unready_to_lb_down_ms), r.hold_s ? fmt::format("{:.3f}", *r.hold_s) : "-",
        r.retried(),
        r.detection_window_s
            ? fmt::format("{} (after {:.1f} s)", r.failed_after_window, *r.detection_window_s)
            : "-",
        r.apiserver_sigterms ? fmt::format("{}", *r.apiserver_sigterms) : "-", r.apiserver_exit);
  }
  return t;
}

std::string seconds_or_dash(const std::optional<double>& s) {
  return s ? fmt::format("{:+.3f} s", *s) : "-";
}

std::string drill_line(const scenario_result::drill_figures& d) {
  return fmt::format(
      "drill (exit {}): checkers saw fall x 503 at {}; HAProxy marked node A DOWN at {}, UP at {}; "
      "new connections to node A's apiserver fell to 0 at {} (per second: {}); the drill said: {}",
      d.exit_code, seconds_or_dash(d.checkers_fell_s), seconds_or_dash(d.lb_down_s),
      seconds_or_dash(d.lb_up_s), seconds_or_dash(d.connections_zero_s),
      d.connections.empty() ? "-" : d.connections, d.summary);
}

// The drill's pass criterion (issue 23): no signal, the drill's own measure of the checkers agrees
// with HAProxy's DOWN within one check interval, and new connections stop after it (the sampler
// looks once a second: within one sample of it).
bool check_drill(const settings& s, const scenario_result& r) {
  const auto& d = *r.drill;
  const double inter = parse_seconds(s.inter);
  std::vector<std::string> why;
  if (d.exit_code != 0) why.push_back(fmt::format("the drill exited {}", d.exit_code));
  if (r.apiserver_sigterms.value_or(0) != 0) why.push_back("the apiserver was signalled");
  if (!d.lb_down_s || !d.lb_up_s) why.push_back("HAProxy did not mark node A down and up");
  if (!d.checkers_fell_s) why.push_back("the drill saw no checker fall");
  if (d.lb_down_s && d.checkers_fell_s && std::abs(*d.checkers_fell_s - *d.lb_down_s) > inter) {
    why.push_back(
        fmt::format("the drill's fall at {:.3f} s and HAProxy's DOWN at {:.3f} s are "
                    "more than one interval ({} s) apart",
                    *d.checkers_fell_s, *d.lb_down_s, inter));
  }
  if (!d.connections_zero_s) {
    why.push_back("new connections to node A never fell to 0");
  } else if (d.lb_down_s && *d.connections_zero_s + 1.0 < *d.lb_down_s) {
    why.push_back("new connections fell to 0 before HAProxy's DOWN");
  }
  for (const auto& w : why) fmt::print("FAIL {}: {}\n", r.name, w);
  return why.empty();
}

// A gnuplot script drawing one panel per scenario: every request at its send time, in the lane of
// the node that answered it or in the "failed" lane (new connections a little above the lane's
// line, keep-alive ones below), with the markers as vertical lines.
std::string gnuplot_script(const std::vector<scenario_result>& results) {
  std::string g =
      "# gnuplot timeline.gp (run in the output directory)\n"
      "set terminal pngcairo size 1400," +
      std::to_string(240 * results.size() + 60) +
      " font 'DejaVu Sans,9'\n"
      "set output 'timeline.png'\n"
      "set datafile separator ','\n"
      "set multiplot layout " +
      std::to_string(results.size()) +
      ",1 title 'requests through HAProxy while node A reboots or its apiserver fails (t = 0: the "
      "reboot request or the fault)'\n"
      "set termoption noenhanced\n"
      "set yrange [-0.7:2.7]\nset ytics ('failed' 0, 'node B' 1, 'node A' 2)\n"
      "set xlabel 'seconds since the reboot request or the fault'\n"
      "set key outside right top\nset grid xtics\n";
  double xmin = 0, xmax = 0;
  for (const auto& r : results) {
    for (const auto& q : r.records) {
      const double t = (static_cast<double>(q.send_us) - static_cast<double>(r.t0_us)) / 1e6;
      xmin = std::min(xmin, t);
      xmax = std::max(xmax, t);
    }
  }
  g += fmt::format("set xrange [{:.1f}:{:.1f}]\n", xmin, xmax + 0.5);
  for (const auto& r : results) {
    g += "unset arrow\nunset label\n";
    int i = 0;
    for (const auto& m : r.markers) {
      const double t = (static_cast<double>(m.usec) - static_cast<double>(r.t0_us)) / 1e6;
      g += fmt::format(
          "set arrow from {0:.4f}, graph 0 to {0:.4f}, graph 1 nohead lc rgb 'gray40' dt 2\n", t);
      g += fmt::format("set label \"{}\" at {:.4f}, graph {:.2f} left font ',8' tc rgb 'gray20'\n",
                       m.name, t + 0.03, 0.95 - 0.09 * (i++ % 7));
    }
    g += fmt::format(
        "set title \"{0}: {1} requests, {2} failed\"\n"
        "lane(x) = x + (strcol(1) eq 'new' ? 0.2 : -0.2)\n"
        "plot '{0}/requests.csv' every ::1 using 2:(strcol(6) eq 'node-a' && $8 == 0 ? "
        "lane(2) : 1/0) with points pt 7 ps 0.2 lc rgb '#2e8b57' title 'answered by node A', \\\n"
        "     '' every ::1 using 2:(strcol(6) eq 'node-b' && $8 == 0 ? lane(1) : 1/0) with points "
        "pt 7 ps 0.2 lc rgb '#1e64c8' title 'answered by node B', \\\n"
        "     '' every ::1 using 2:($8 == 1 ? lane(0) : 1/0) with points pt 2 ps 0.8 lc rgb "
        "'#d62728' title 'failed'\n",
        r.name, r.records.size(), r.failed());
  }
  g += "unset multiplot\n";
  return g;
}

// A fault baseline must show failed requests; with the checks there must be fewer, and none among
// the requests sent after the detection window.
bool check_fault_scenario(const scenario_result& r, const std::vector<scenario_result>& results) {
  if (!is_shim_scenario(r.name)) {
    if (r.failed() != 0) return true;
    fmt::print("FAIL {}: no failed request without the checks: the test cannot tell\n", r.name);
    return false;
  }
  bool ok = true;
  if (r.failed_after_window != 0) {
    fmt::print("FAIL {}: {} failed requests sent after the detection window ({:.1f} s)\n", r.name,
               r.failed_after_window, *r.detection_window_s);
    ok = false;
  }
  const std::string baseline = "baseline-" + r.name.substr(std::string_view("shim-").size());
  const auto b = std::find_if(results.begin(), results.end(),
                              [&](const auto& x) { return x.name == baseline; });
  if (b != results.end() && b->problems.empty() && r.failed() >= b->failed()) {
    fmt::print("FAIL {}: {} failed requests with the checks, {} without (want fewer)\n", r.name,
               r.failed(), b->failed());
    ok = false;
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

  std::vector<scenario_result> results;
  for (const auto& name : s.scenarios) {
    fmt::print("--- {}\n", name);
    std::fflush(stdout);
    try {
      results.push_back(run_scenario(s, name, self));
    } catch (const std::exception& e) {
      scenario_result r;
      r.name = name;
      r.problems.push_back(e.what());
      results.push_back(std::move(r));
    }
    const auto& r = results.back();
    for (const auto& m : r.markers) {
      fmt::print("  {:+9.3f} s  {}\n",
                 (static_cast<double>(m.usec) - static_cast<double>(r.t0_us)) / 1e6, m.name);
    }
    fmt::print("  {} requests, {} failed\n", r.records.size(), r.failed());
    if (r.apiserver_sigterms) {
      fmt::print("  node A's apiserver: SIGTERMs {}, exit {}\n", *r.apiserver_sigterms,
                 r.apiserver_exit);
    }
    if (r.name == "shim-cancel") {
      fmt::print("  node A answered {} requests after the cancel\n", r.node_a_answers_after_cancel);
    }
    if (r.drill) fmt::print("  {}\n", drill_line(*r.drill));
  }
  std::string summary = table(s, results);
  for (const auto& r : results) {
    if (r.drill) summary += "\n" + r.name + ": " + drill_line(*r.drill) + "\n";
  }
  fmt::print("\n{}", summary);
  std::ofstream(s.out_dir / "summary.md", std::ios::trunc) << summary;
  std::ofstream(s.out_dir / "timeline.gp", std::ios::trunc) << gnuplot_script(results);

  bool ok = true;
  for (const auto& r : results) {
    if (!r.problems.empty()) {
      fmt::print("FAIL {}: the scenario did not run: {}\n", r.name, r.problems.front());
      ok = false;
    }
  }
  if (s.check) {
    for (const auto& r : results) {
      if (!r.problems.empty()) continue;
      if (is_fault_scenario(r.name)) {
        ok = check_fault_scenario(r, results) && ok;
        continue;
      }
      if (must_fail(r.name)) {
        if (r.failed() == 0) {
          fmt::print("FAIL {}: no failed request in a setup known to fail: the test cannot tell\n",
                     r.name);
          ok = false;
        }
      } else if (is_shim_scenario(r.name) && r.failed() != 0) {
        fmt::print("FAIL {}: {} failed requests with the shim (want 0)\n", r.name, r.failed());
        ok = false;
      }
      const bool left_to_kubelet = r.name == "shim-gns" || r.name == "shim-gns-priority";
      if (left_to_kubelet && (r.apiserver_sigterms != 1u || r.apiserver_exit != "0")) {
        fmt::print(
            "FAIL {}: the apiserver got {} SIGTERMs and exited {} (want 1, kubelet's, and exit "
            "0)\n",
            r.name, r.apiserver_sigterms.value_or(0), r.apiserver_exit);
        ok = false;
      }
      if (r.drill && !check_drill(s, r)) ok = false;
      if (r.name == "shim-cancel" && r.node_a_answers_after_cancel == 0) {
        fmt::print("FAIL {}: node A never answered again after the cancel\n", r.name);
        ok = false;
      }
    }
  }
  sandbox::reap_orphans();
  return ok ? 0 : 1;
}
