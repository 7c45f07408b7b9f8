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
// The real-node scenarios (issue 32) run node A as a real node is set up, behind HAProxy with
// `retries 3` and no redispatch (as the issue measured; kubeadm's HA guide adds `option
// redispatch`, which sends a connection refused by a kube-apiserver that stopped accepting to the
// other node and would leave the baselines nothing to show), the shim as its unit runs it (no
// --signal-delay: it plans the signal from the stand-in's --shutdown-delay-duration):
//  - baseline-kubeadm, shim-kubeadm: kubeadm's defaults (delay 0, no retry-after). Without the
//    shim the reboot stops kube-apiserver as systemd does (SIGTERM at reboot.target, SIGKILL after
//    the stop timeout) and the LB checks its own /readyz: --check wants failed requests. With the
//    shim, the LB checking the shim: 0 failed, one SIGTERM no earlier than the drain, exit 0.
//  - shim-kubeadm-lb-apiserver: the same with the LB checking kube-apiserver's own /readyz, which
//    no signal time can drain. The shim runs a minute with no probe of its /readyz first, so that
//    it knows; --check wants, read just before the reboot, the metric
//    shutdown_shim_apiserver_stops_accepting_early at 1 and the check signal-plan's WARNING, and
//    failed requests (what the warning says will happen).
//  - baseline-openshift, shim-openshift: OpenShift's settings (delay = drain,
//    --shutdown-send-retry-after, HAProxy's `option httpchk GET /readyz HTTP/1.0` on
//    kube-apiserver's port); the baseline stopped by the reboot as baseline-apiserver-delay. After
//    the delay the stand-in answers 429 + Retry-After: 5 + Connection: close, but only while
//    requests are still in flight on it (then it stops listening), and the sampler's kept-alive
//    connection never overlaps itself: a slow client (GET /hold?seconds=1 back to back, one
//    kept-alive connection per node) keeps one in flight, as a cluster always has some, so the
//    sampler's kept-alive connection on node A meets the 429. The load client waits it out and
//    sends the request again as client-go does (load_client's client_go_retry_after); the table
//    counts such requests apart ("waited out"): the field's samplers would count them as failed.
//    --check wants with the shim 0 failed as client-go sees them and at least one request that met
//    the 429 (else the pair tested nothing of retry-after), one SIGTERM, sent before the drain's
//    end (the delay covers the drain: at +0), exit 0.
//  - baseline-kubelet-restart, shim-kubelet-restart: the stand-in kubelet runs kube-apiserver as a
//    static pod without graceful node shutdown and starts it again when it exits; kubeadm's delay
//    0. The shim has --signal-delay=0 (the timing before issue 32), so kube-apiserver exits at once
//    and kubelet restarts it during the hold. --check wants every kube-apiserver process that ran
//    before reboot.target signalled exactly once and exited 0 before reboot.target started, at
//    least one restart, and the shim's TargetRestarted records and `report --json`'s
//    targets_restarted counting the restarts; the failed requests (the signal at +0 with a delay
//    of 0) are reported, not judged. The baseline is stopped by the reboot as
//    baseline-apiserver-delay, kubelet going down with the node at reboot.target.
//  - baseline-gns-etcd, shim-gns-etcd, shim-gns-etcd-fixed: kubelet's graceful node shutdown
//    running kubeadm's etcd and kube-apiserver as static pods, both at priority 2000001000, so
//    kubelet stops etcd together with kube-apiserver; the load GETs a namespace (etcd-backed); the
//    shim reads kubelet's config and its static pod directory, with both manifests as kubeadm
//    writes them. --check wants failed requests in the baseline (no shim, the LB checking
//    kube-apiserver) and with the shim, the shim's warning before the reboot
//    (shutdown_shim_kubelet_stops_etcd_with_apiserver 1, "WARNING: kubelet stops etcd" naming the
//    fix that -fixed applies), and in -fixed (the fix applied: kube-apiserver at 2000000000,
//    system-cluster-critical, in a group of its own before etcd's) no etcd warning and 0 failed.
//    Both shim variants: one SIGTERM, kubelet's, and exit 0.
// The static pods' processes are kubelet's children: when reboot.target starts they go down with
// the node, whatever still runs in kubelet's process group being SIGKILLed then (after the stop
// timeout for the baseline that systemd stops).
//
// --server=real --realapi-dir=DIR (issue 33): kube-apiserver on each node is tests/realapi's
// realapi (the real k8s.io/apiserver) with the scenario's same settings, over TLS with the run's
// certificate (sandbox::test_pki) and a bearer token; every client sends the token (the LB stays
// mode tcp; its checks of kube-apiserver go over TLS), and per node a naive and a retrying
// client-go agent (tests/realapi's nodeagent, HTTP/2) write their node through the LB beside the
// load. --check then also wants, wherever it wants 0 failed requests, 0 failed agent requests and
// no naive agent Degraded. The etcd scenarios need the stand-in's etcd and are refused.
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
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client_go_agents.hpp"
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
                                                "shim-drill",
                                                "baseline-kubeadm",
                                                "shim-kubeadm",
                                                "shim-kubeadm-lb-apiserver",
                                                "baseline-openshift",
                                                "shim-openshift",
                                                "baseline-kubelet-restart",
                                                "shim-kubelet-restart",
                                                "baseline-gns-etcd",
                                                "shim-gns-etcd",
                                                "shim-gns-etcd-fixed"};

bool is_crash_scenario(const std::string& s) { return s.ends_with("-apiserver-crash"); }
bool is_hang_scenario(const std::string& s) { return s.ends_with("-apiserver-hang"); }
// The apiserver breaks while the node stays up: no reboot.
bool is_fault_scenario(const std::string& s) { return is_crash_scenario(s) || is_hang_scenario(s); }
// A reboot scenario with the shim, or a fault scenario with the target and upstream checks.
bool is_shim_scenario(const std::string& s) { return s.starts_with("shim-"); }
// Whether the nodes run a shim (the fault baselines run one without the checks).
bool runs_shim(const std::string& s) { return is_shim_scenario(s) || is_fault_scenario(s); }
// Node A runs the stand-in kubelet with graceful node shutdown and one target, the apiserver the
// test started (issue 13).
bool runs_target_kubelet(const std::string& s) {
  return s == "shim-gns-naive" || s == "shim-gns" || s == "shim-gns-priority";
}
// `shutdown-shim drill` on node A instead of a reboot (issue 23).
bool is_drill_scenario(const std::string& s) { return s == "shim-drill"; }
// Issue 32, the node as it really is. kubeadm's defaults: kube-apiserver's own shutdown delay of 0,
// no retry-after.
bool is_kubeadm_scenario(const std::string& s) {
  return s == "baseline-kubeadm" || s == "shim-kubeadm" || s == "shim-kubeadm-lb-apiserver";
}
// OpenShift's: a delay equal to the drain, --shutdown-send-retry-after.
bool is_openshift_scenario(const std::string& s) { return s.ends_with("-openshift"); }
// kubelet runs kube-apiserver as a static pod and starts it again when it exits (no graceful node
// shutdown).
bool is_restart_scenario(const std::string& s) { return s.ends_with("-kubelet-restart"); }
// kubelet's graceful node shutdown with kubeadm's etcd beside kube-apiserver.
bool is_etcd_scenario(const std::string& s) { return s.find("-gns-etcd") != std::string::npos; }
bool is_real_node_scenario(const std::string& s) {
  return is_kubeadm_scenario(s) || is_openshift_scenario(s) || is_restart_scenario(s) ||
         is_etcd_scenario(s);
}
// The stand-in kubelet starts node A's apiserver (and etcd) from a pods file.
bool runs_static_pods(const std::string& s) {
  return is_restart_scenario(s) || is_etcd_scenario(s);
}
// kube-apiserver's --shutdown-delay-duration: kubeadm sets none (0), elsewhere the drain.
double apiserver_delay_s(const settings& st, const std::string& s) {
  return is_kubeadm_scenario(s) || is_restart_scenario(s) ? 0 : st.drain_s;
}
// HAProxy checks kube-apiserver's own /readyz: without a shim, and where the scenario says so.
bool lb_checks_apiserver(const std::string& s) {
  return !runs_shim(s) || s == "shim-kubeadm-lb-apiserver" || s == "shim-openshift";
}
// The reboot stops the apiserver as systemd stops a unit: SIGTERM when reboot.target starts,
// SIGKILL after the stop timeout.
bool stopped_on_reboot(const std::string& s) {
  return s == "baseline-apiserver-delay" || s == "baseline-kubeadm" || s == "baseline-openshift" ||
         s == "baseline-kubelet-restart";
}
// The real-node scenarios' load balancer: retries without redispatch.
constexpr unsigned kRealNodeLbRetries = 3;
// The shim takes the load balancer to check kube-apiserver itself once no TCP peer has probed its
// /readyz for this long (shim_status::kLbProbeWindow).
constexpr std::chrono::seconds kShimLbProbeWindow{60};
// The openshift pair's slow client: a request in flight for a second, back to back.
const std::string kSlowTarget = "/hold?seconds=1";
// The etcd scenarios' load: a request that kube-apiserver answers from etcd.
const std::string kEtcdBackedTarget = "/api/v1/namespaces/default";
const std::string kMetricStopsAcceptingEarly = "shutdown_shim_apiserver_stops_accepting_early";
const std::string kMetricStopsEtcd = "shutdown_shim_kubelet_stops_etcd_with_apiserver";
const std::string kMetricSignalDelay = "shutdown_shim_signal_delay_seconds";

// A reboot scenario whose setup is known to fail clients: --check wants failed requests, or the
// test could not tell the shim's effect from luck (or, with the shim, what its warning says).
bool must_fail(const std::string& s) {
  return s == "baseline-no-signal" || s == "shim-gns-naive" || s == "baseline-kubeadm" ||
         s == "shim-kubeadm-lb-apiserver" || s == "baseline-gns-etcd" || s == "shim-gns-etcd";
}
// With the shim, failed requests that are reported, not judged: --signal-delay=0 with a delay of 0
// stops kube-apiserver before the load balancer has drained it (what the signal plan warns of).
bool failures_reported(const std::string& s) { return s == "shim-kubelet-restart"; }

[[noreturn]] void usage(const std::string& error) {
  fmt::print(
      stderr,
      "e2e_disruption: {}\n"
      "usage: e2e_disruption [--drain=3s] [--exit-timeout=10s] [--stop-timeout=DUR]\n"
      "  [--inter=1s] [--fall=2] [--rise=2] [--rate=200] [--request-time=15ms]\n"
      "  [--lead=2s] [--tail=2s] [--request-timeout=10s] [--restart-after=5s] [--hang=10s]\n"
      "  [--hang-request-timeout=2s]\n"
      "  [--lb-mode=tcp|http] [--lb-retries=1] [--out-dir=DIR] [--scenario=NAME]... [--check]\n"
      "  [--server=stand-in|real --realapi-dir=DIR]\n"
      "scenarios: baseline-no-signal baseline-apiserver-delay shim-attach shim-wrapper "
      "shim-cancel\n"
      "  shim-gns-naive shim-gns shim-gns-priority baseline-apiserver-crash shim-apiserver-crash\n"
      "  baseline-apiserver-hang shim-apiserver-hang shim-drill baseline-kubeadm shim-kubeadm\n"
      "  shim-kubeadm-lb-apiserver baseline-openshift shim-openshift baseline-kubelet-restart\n"
      "  shim-kubelet-restart baseline-gns-etcd shim-gns-etcd shim-gns-etcd-fixed\n",
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
  if (s.real_server && s.realapi_dir.empty()) usage("--server=real needs --realapi-dir");
  // realapi has no etcd: the etcd scenarios (the stand-in's --etcd-pidfile) are the stand-in's.
  for (const auto& n : s.scenarios) {
    if (s.real_server && is_etcd_scenario(n))
      usage(n +
            " needs etcd (the stand-in's --etcd-pidfile), which realapi has not: stand-in only");
  }
  if (s.scenarios.empty()) {
    for (const auto& n : kAllScenarios) {
      if (!s.real_server || !is_etcd_scenario(n)) s.scenarios.push_back(n);
    }
  }
  if (s.stop_timeout_s == 0) s.stop_timeout_s = s.drain_s * 90.0 / 70.0;
  if (s.rate <= 0 || s.fall == 0 || s.rise == 0) usage("rate, fall and rise must be positive");
  if (s.request_timeout_s <= 0 || s.hang_request_timeout_s <= 0)
    usage("request timeouts must be positive");
  return s;
}

// The upstream check of the shim-apiserver-* scenarios, on node A's kube-apiserver.
std::vector<std::string> upstream_flags(const e2e::api_server& server, std::uint16_t api_port,
                                        const settings& s) {
  std::vector<std::string> f = {
      fmt::format("--upstream-readyz={}://127.0.0.1:{}/readyz", e2e::api_scheme(server), api_port),
      "--upstream-interval=" + seconds(s.upstream_interval_s),
      "--upstream-timeout=" + seconds(s.upstream_timeout_s),
      fmt::format("--upstream-fall={}", s.upstream_fall)};
  if (server.tls()) f.push_back("--upstream-ca-file=" + server.ca.string());
  return f;
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
// A static pod's grace where its manifest says none, as kubeadm's: the API's default.
constexpr long long kPodGraceS = 30;
// kubeadm's static pods' priority (system-node-critical), and the other system class's
// (system-cluster-critical), which the etcd warning's fix gives kube-apiserver.
constexpr long long kNodeCriticalPriority = 2000001000;
constexpr long long kClusterCriticalPriority = 2000000000;

// The shim's hold (drain + exit timeout) in kubelet's whole seconds.
long long whole_hold_s(const settings& s) {
  return std::llround(std::ceil(s.drain_s + s.exit_timeout_s));
}

// The apiserver's grace in kubelet's whole seconds: at least the drain and the exit timeout, so
// that kubelet's SIGKILL cuts neither, and at least the pod's own (the API's 30 s default where
// the manifest says none, as kubeadm's current one), which a shorter group grace would cut.
long long kubelet_grace_s(const settings& s, const std::string& scenario) {
  return scenario == "shim-gns-priority" || is_etcd_scenario(scenario)
             ? std::max(whole_hold_s(s), kPodGraceS)
             : whole_hold_s(s);
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

// kube-apiserver's manifest as kubeadm v1.31 writes it (`priority` next to the class name, no
// terminationGracePeriodSeconds: the API's 30 s), its command with the shutdown delay the stand-in
// runs with (kubeadm's apiServer.extraArgs).
std::string kubeadm_apiserver_manifest(double delay_s, long long priority,
                                       std::string_view priority_class) {
  return fmt::format(
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
      "  priority: {}\n"
      "  priorityClassName: {}\n"
      "  securityContext:\n"
      "    seccompProfile:\n"
      "      type: RuntimeDefault\n"
      "status: {{}}\n",
      seconds(delay_s), priority, priority_class);
}

// shim-gns-priority's files: kubeadm's kube-apiserver manifest (priority 2000001000), and the two
// periods (shutdownGracePeriod, shutdownGracePeriodCriticalPods) whose critical group, where that
// priority falls, gets the pod's grace after the other group's kKubeletNormalGroupS. Both say what
// the stand-in does: SIGTERM at +0..+3 s, SIGKILL after kubelet_grace_s.
void write_kubelet_priority_files(const fs::path& config, const fs::path& manifest,
                                  const settings& s) {
  const long long critical = kubelet_grace_s(s, "shim-gns-priority");
  std::ofstream(config, std::ios::trunc) << fmt::format(
      "apiVersion: kubelet.config.k8s.io/v1beta1\n"
      "kind: KubeletConfiguration\n"
      "shutdownGracePeriod: {}s\n"
      "shutdownGracePeriodCriticalPods: {}s\n",
      kKubeletNormalGroupS + critical, critical);
  std::ofstream(manifest, std::ios::trunc)
      << kubeadm_apiserver_manifest(s.drain_s, kNodeCriticalPriority, "system-node-critical");
}

// --- static pods (issue 32) ---------------------------------------------------------------------

struct kubelet_group {
  long long priority;
  long long grace_s;
};

// kubelet's shutdownGracePeriodByPodPriority in the etcd scenarios (the stand-in's --group flags
// and the KubeletConfiguration the shim reads). As a kubeadm node with graceful node shutdown has
// it: a group for the other pods (scaled down) and the critical one, where kubeadm's etcd and
// kube-apiserver (both 2000001000) fall, as long as kube-apiserver's pod grace (so that it cuts
// nothing). -fixed, what the shim's warning names: a group of kube-apiserver's own, as long as the
// hold and the pod's own grace (the longer: kubelet kills at the shorter of the two), before
// etcd's, which keeps its grace.
std::vector<kubelet_group> etcd_scenario_groups(const settings& s, const std::string& scenario) {
  const long long critical = kubelet_grace_s(s, scenario);
  if (scenario == "shim-gns-etcd-fixed") {
    return {{kClusterCriticalPriority, std::max(whole_hold_s(s), critical)},
            {kNodeCriticalPriority, critical}};
  }
  return {{0, kKubeletNormalGroupS}, {kClusterCriticalPriority, critical}};
}

// How long kubelet may hold a shutdown: its groups' graces together (periodRequested()).
long long kubelet_period_s(const std::vector<kubelet_group>& groups) {
  long long total = 0;
  for (const auto& g : groups) total += g.grace_s;
  return total;
}

// etcd's manifest as kubeadm writes it: the same priority and class as kube-apiserver's.
std::string kubeadm_etcd_manifest() {
  return "apiVersion: v1\n"
         "kind: Pod\n"
         "metadata:\n"
         "  annotations:\n"
         "    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://127.0.0.1:2379\n"
         "  creationTimestamp: null\n"
         "  labels:\n"
         "    component: etcd\n"
         "    tier: control-plane\n"
         "  name: etcd\n"
         "  namespace: kube-system\n"
         "spec:\n"
         "  containers:\n"
         "  - command:\n"
         "    - etcd\n"
         "    - --advertise-client-urls=https://127.0.0.1:2379\n"
         "    - --data-dir=/var/lib/etcd\n"
         "    - --listen-client-urls=https://127.0.0.1:2379\n"
         "    image: registry.k8s.io/etcd:3.5.15-0\n"
         "    imagePullPolicy: IfNotPresent\n"
         "    name: etcd\n"
         "  hostNetwork: true\n"
         "  priority: 2000001000\n"
         "  priorityClassName: system-node-critical\n"
         "  securityContext:\n"
         "    seccompProfile:\n"
         "      type: RuntimeDefault\n"
         "status: {}\n";
}

// The etcd scenarios' files as the node has them: kubelet's static pod directory with etcd's and
// kube-apiserver's manifests, and kubelet's configuration with the groups.
void write_etcd_scenario_files(const fs::path& config, const fs::path& manifest_dir,
                               const settings& s, const std::string& scenario) {
  std::string by_priority;
  for (const auto& g : etcd_scenario_groups(s, scenario)) {
    by_priority += fmt::format("  - priority: {}\n    shutdownGracePeriodSeconds: {}\n", g.priority,
                               g.grace_s);
  }
  std::ofstream(config, std::ios::trunc) << "apiVersion: kubelet.config.k8s.io/v1beta1\n"
                                            "kind: KubeletConfiguration\n"
                                            "shutdownGracePeriodByPodPriority:\n"
                                         << by_priority;
  fs::create_directories(manifest_dir);
  std::ofstream(manifest_dir / "etcd.yaml", std::ios::trunc) << kubeadm_etcd_manifest();
  std::ofstream(manifest_dir / "kube-apiserver.yaml", std::ios::trunc)
      << (scenario == "shim-gns-etcd-fixed"
              ? kubeadm_apiserver_manifest(s.drain_s, kClusterCriticalPriority,
                                           "system-cluster-critical")
              : kubeadm_apiserver_manifest(s.drain_s, kNodeCriticalPriority,
                                           "system-node-critical"));
}

// One line of the stand-in's pods file: NAME PRIORITY TERMINATION_GRACE_S COMMAND [ARG...].
std::string pod_line(const std::string& name, long long priority,
                     const std::vector<std::string>& argv) {
  std::string line = fmt::format("{} {} {}", name, priority, kPodGraceS);
  for (const auto& a : argv) line += " " + a;
  return line + "\n";
}

// The stand-in kubelet running static pods: without groups (the restart scenarios: no graceful
// node shutdown, no lock; it starts what exits again), or with the etcd scenarios' groups.
std::vector<std::string> static_pod_kubelet_argv(const std::string& binary,
                                                 const std::string& bus_address,
                                                 const fs::path& pods, const fs::path& log,
                                                 const std::vector<kubelet_group>& groups) {
  std::vector<std::string> argv = {binary, "--address=" + bus_address, "--pods=" + pods.string(),
                                   "--log=" + log.string()};
  for (const auto& g : groups) argv.push_back(fmt::format("--group={}:{}", g.priority, g.grace_s));
  return argv;
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
  e2e::api_server server;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (e2e::parse_server_flag(a, server))
      continue;
    else if (auto v = flag(a, "--dir"))
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
  node.spawn("kube-apiserver",
             apiserver_argv(server, name, api_port, node.dir(), s.drain_s, s.request_time_s));
  bool ok = wait_until([&] { return read_pid(node.dir() / (name + ".pid")).has_value(); }, 20s);
  if (ok && shim_port) {
    auto argv_shim = shim_argv(node.tools().shim, shim_port, s.drain_s, s.exit_timeout_s,
                               node.dir() / "shim-events.jsonl", node.dir() / "runtime");
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

// One kube-apiserver process kubelet ran (static pods), and what the stand-in's logs say of it.
struct apiserver_process {
  pid_t pid = 0;
  std::uint64_t started_us = 0;
  std::size_t sigterms = 0;
  std::optional<std::uint64_t> sigterm_us;  // the first
  std::string exit = "-";                   // its EXIT code, "-" for none
  std::optional<std::uint64_t> exit_us;
};

// kubelet's POD_STARTED lines for kube-apiserver before until_us, each with the SIGTERM and EXIT
// lines of the stand-in's logs (shared by every process of the pod) from its start to the next
// one's: kubelet starts a pod again only after it exited, so the times part the processes.
std::vector<apiserver_process> static_pod_processes(const fs::path& kubelet_log,
                                                    const fs::path& signal_log,
                                                    const fs::path& lifecycle_log,
                                                    std::uint64_t until_us) {
  std::vector<apiserver_process> out;
  for (const auto& l : sandbox::read_timed_lines(kubelet_log)) {
    if (l.word != "POD_STARTED" || l.usec >= until_us) continue;
    std::istringstream detail(l.detail);
    std::string pod;
    pid_t pid = 0;
    if (!(detail >> pod >> pid) || pod != "kube-apiserver") continue;
    apiserver_process p;
    p.pid = pid;
    p.started_us = l.usec;
    out.push_back(p);
  }
  const auto signals = sandbox::read_timed_lines(signal_log);
  const auto lifecycle = sandbox::read_timed_lines(lifecycle_log);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t from = out[i].started_us;
    const std::uint64_t to =
        i + 1 < out.size() ? out[i + 1].started_us : std::numeric_limits<std::uint64_t>::max();
    for (const auto& l : signals) {
      if (l.word != "SIGTERM" || l.usec < from || l.usec >= to) continue;
      if (out[i].sigterms++ == 0) out[i].sigterm_us = l.usec;
    }
    for (const auto& l : lifecycle) {
      if (l.word == "EXIT" && l.usec >= from && l.usec < to && !out[i].exit_us) {
        out[i].exit = l.detail;
        out[i].exit_us = l.usec;
      }
    }
  }
  return out;
}

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
  std::string apiserver_exit = "-";  // each process's, in order: "0", "0,0"
  // With a shim: its first SIGTERM after the shim turned unready, and the shim's DrainElapsed.
  std::optional<double> sigterm_after_unready_s;
  std::optional<std::uint64_t> first_sigterm_us;
  std::optional<std::uint64_t> drain_elapsed_us;
  // The real-node scenarios with a shim (issue 32): what it said just before the reboot, a metric
  // and a check of /readyz?verbose.
  struct shim_said {
    std::string metric;
    std::optional<double> value;
    std::string check;
    std::string line;
  };
  std::optional<shim_said> said;
  // The static pod scenarios: each kube-apiserver process kubelet ran before reboot.target; the
  // restart scenarios: the shim's TargetRestarted records and `report --json`.
  std::vector<apiserver_process> processes;
  std::size_t target_restarted_events = 0;
  std::string report_json;
  std::vector<std::string> notes;  // what the summary says under the table
  // Against realapi: the client-go agents, naive and retrying, one of each per node.
  std::vector<e2e::go_agent_verdict> go_agents;
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

double seconds_since(std::uint64_t t0_us, std::uint64_t usec) {
  return (static_cast<double>(usec) - static_cast<double>(t0_us)) / 1e6;
}

// A shim command (drill, report) run to its end: its exit code (-1: it did not end within the
// timeout) and its stdout, which stays in stdout_path (stderr beside it, .err).
struct command_output {
  int exit_code = -1;
  std::string text;
};
command_output run_to_file(const std::vector<std::string>& argv, const fs::path& stdout_path,
                           std::chrono::milliseconds timeout) {
  sandbox::spawn_options o;
  for (char** e = environ; e && *e; ++e) o.env.emplace_back(*e);
  o.stdout_path = stdout_path;
  o.stderr_path = fs::path(stdout_path).replace_extension(".err");
  std::error_code ec;
  fs::remove(stdout_path, ec);
  sandbox::child_process p("shutdown-shim-" + argv.at(1), argv, o);
  const auto status = p.wait_for_exit(timeout);
  if (!status) return {};
  return {sandbox::shell_exit_code(*status), sandbox::read_text_file(stdout_path)};
}

// What the shim says just before the reboot (issue 32): of kubelet stopping etcd with
// kube-apiserver, or of its signal plan (with the load balancer checking kube-apiserver itself, its
// warning). The metric first, then the check's line: reading /readyz?verbose is a probe, after
// which the shim takes a load balancer to check it.
scenario_result::shim_said read_shim_said(std::uint16_t port, const std::string& scenario) {
  scenario_result::shim_said said;
  said.metric = is_etcd_scenario(scenario)                ? kMetricStopsEtcd
                : scenario == "shim-kubeadm-lb-apiserver" ? kMetricStopsAcceptingEarly
                                                          : kMetricSignalDelay;
  said.check = is_etcd_scenario(scenario) ? "kubelet-shutdown" : "signal-plan";
  // The plan is known once the shim has read kubelet's files and the target's command line.
  wait_until([&] { return e2e::shim_metric(port, said.metric).has_value(); }, 10s, 100ms);
  said.value = e2e::shim_metric(port, said.metric);
  said.line = e2e::shim_check_line(port, said.check).value_or("(no such check)");
  return said;
}

// --- one scenario
// ---------------------------------------------------------------------------------

scenario_result run_scenario(const settings& s, const e2e::api_server& server,
                             const std::string& name, const fs::path& self) {
  scenario_result res;
  res.name = name;
  const fs::path out = s.out_dir / name;
  fs::create_directories(out);
  const bool shim = runs_shim(name);
  const auto groups =
      is_etcd_scenario(name) ? etcd_scenario_groups(s, name) : std::vector<kubelet_group>{};
  // Also logind's InhibitDelayMaxSec: at least kubelet's whole shutdown, or it would run without
  // graceful node shutdown.
  const double hold_bound_s =
      std::max(s.drain_s + s.exit_timeout_s + 30, static_cast<double>(kubelet_period_s(groups)));

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
  for (auto& f : e2e::server_flags(server)) b_argv.push_back(std::move(f));
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
  const fs::path static_pod_dir = a.dir() / "manifests";  // the etcd scenarios': kubelet's
  const fs::path pods_file = a.dir() / "pods";
  const fs::path etcd_pidfile = a.dir() / "etcd.pid";
  auto api_argv = apiserver_argv(server, "node-a", a_api, a.dir(), apiserver_delay_s(s, name),
                                 s.request_time_s);
  if (is_openshift_scenario(name)) api_argv.push_back("--shutdown-send-retry-after");
  if (is_etcd_scenario(name)) api_argv.push_back("--etcd-pidfile=" + etcd_pidfile.string());
  sandbox::child_process* shim_process = nullptr;
  sandbox::child_process* api_process = nullptr;  // null in wrapper mode and for static pods
  sandbox::child_process* kubelet = nullptr;      // the shim-gns and static pod scenarios'
  auto fail = [&](const std::string& why) {
    res.problems.push_back(why);
    std::ostringstream logs;
    a.dump_logs(logs, 40);
    std::cerr << "scenario " << name << ": " << why << "\n" << logs.str();
    return res;
  };
  if (name == "shim-wrapper") {
    auto argv =
        shim_argv(tools.shim, a_shim, s.drain_s, s.exit_timeout_s, event_log, a.dir() / "runtime");
    argv.push_back("--");
    argv.insert(argv.end(), api_argv.begin(), api_argv.end());
    shim_process = &a.spawn("shutdown-shim", argv);
  } else if (runs_static_pods(name)) {
    // kubelet runs kube-apiserver (and etcd, on a port of its own) from its pods file; with
    // graceful node shutdown it takes its lock first. The shim starts once they run.
    std::ofstream pods(pods_file, std::ios::trunc);
    if (is_etcd_scenario(name)) {
      pods << pod_line(
          "etcd", kNodeCriticalPriority,
          apiserver_argv(server, "etcd", next_service_port(), a.dir(), 0, s.request_time_s));
      write_etcd_scenario_files(kubelet_config, static_pod_dir, s, name);
    }
    pods << pod_line(
        "kube-apiserver",
        name == "shim-gns-etcd-fixed" ? kClusterCriticalPriority : kNodeCriticalPriority, api_argv);
    pods.close();
    kubelet = &a.spawn("fake-kubelet", static_pod_kubelet_argv(tools.fake_kubelet, a.bus_address(),
                                                               pods_file, kubelet_log, groups));
    if (!groups.empty() && !wait_kubelet_watching(a, *kubelet, kubelet_log))
      return fail("node A's kubelet did not take its lock");
    if (!wait_until(
            [&] {
              return read_pid(pidfile) && (!is_etcd_scenario(name) || read_pid(etcd_pidfile));
            },
            20s))
      return fail("node A's kubelet did not start its static pods");
    if (shim) {
      auto argv = shim_argv(tools.shim, a_shim, s.drain_s, s.exit_timeout_s, event_log,
                            a.dir() / "runtime");
      argv.push_back("--target-pidfile=" + pidfile.string());
      // The signal at +0, as before issue 32 (an operator's setting then): with kubeadm's delay of
      // 0, kube-apiserver exits during the hold.
      if (is_restart_scenario(name)) argv.push_back("--signal-delay=0s");
      if (is_etcd_scenario(name)) {
        argv.push_back("--kubelet-config=" + kubelet_config.string());
        argv.push_back("--static-pod-manifest=" + static_pod_dir.string());
      }
      shim_process = &a.spawn("shutdown-shim", argv);
    }
  } else {
    api_process = &a.spawn("kube-apiserver", api_argv);
    // kubelet, which runs the static pod, holds its lock before the shim starts.
    if (runs_target_kubelet(name)) {
      kubelet = &a.spawn("fake-kubelet", kubelet_argv(tools.fake_kubelet, a.bus_address(), pidfile,
                                                      kubelet_log, s, name));
      if (!wait_kubelet_watching(a, *kubelet, kubelet_log))
        return fail("node A's kubelet did not take its lock");
    }
    if (shim) {
      auto argv = shim_argv(tools.shim, a_shim, s.drain_s, s.exit_timeout_s, event_log,
                            a.dir() / "runtime");
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
        for (auto& f : upstream_flags(server, a_api, s)) argv.push_back(std::move(f));
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
  // The real-node scenarios: retries without redispatch, as the issue measured (and OpenShift's
  // on-prem HAProxy runs); a redispatch would send a connection refused by a kube-apiserver that
  // stopped accepting to node B, and only the requests cut in flight would fail, with or without
  // the shim. OpenShift's checks HTTP/1.0.
  if (is_real_node_scenario(name)) {
    lo.retries = kRealNodeLbRetries;
    lo.redispatch = false;
  }
  if (is_openshift_scenario(name)) lo.check_version = "HTTP/1.0";
  lo.frontend_port = fe_port;
  const bool check_api = lb_checks_apiserver(name);
  // kube-apiserver's /readyz over TLS, as OpenShift's on-prem HAProxy checks it.
  lo.check_ssl = check_api && server.tls();
  lo.servers = {{"node-a", a_api, check_api ? a_api : a_shim},
                {"node-b", b_api, check_api ? b_api : b_shim}};
  e2e::haproxy lb(s.haproxy, out, lo);
  // Both nodes answer through it before anything happens.
  if (!e2e::answered_by(server, fe_port, {"node-a", "node-b"}, 20s))
    return fail("the load balancer does not reach both nodes");

  if (name == "shim-kubeadm-lb-apiserver") {
    // The shim knows that the load balancer checks kube-apiserver itself once no TCP peer has
    // probed its /readyz for a minute (the last were the test's own at its start). /metrics is no
    // probe.
    wait_until([&] { return e2e::shim_metric(a_shim, kMetricStopsAcceptingEarly) == 1.0; },
               kShimLbProbeWindow + 30s, 500ms);
  }

  // The run.
  const double timeout_s = is_hang_scenario(name) ? s.hang_request_timeout_s : s.request_timeout_s;
  const auto timeout = std::chrono::milliseconds(std::llround(timeout_s * 1000));
  // The openshift pair: the 429s last only while requests are still in flight on node A after its
  // delay (it stops listening once they have drained), and the sampler's kept-alive connection
  // never overlaps itself; in a cluster some request is always in flight (a slow LIST). So a slow
  // client keeps one in flight on each node: its kept-alive connections, opened before the
  // sampler's, one after the other, are put one on each node by round robin.
  // Against realapi, client-go's own agents beside the load (HTTP/2).
  std::optional<e2e::client_go_agents> go_agents;
  if (server.real) {
    go_agents.emplace(server, s.realapi_dir / "nodeagent", out, fe_port,
                      std::vector<std::string>{"node-a", "node-b"});
    // Before the clients whose connections round robin places, one on each node.
    if (!go_agents->wait_sending(30s)) return fail("the client-go agents did not start sending");
  }
  std::optional<e2e::load_client> slow;
  if (is_openshift_scenario(name)) {
    e2e::load_options so{.port = fe_port,
                         .target = kSlowTarget,
                         .rate = 1,
                         .timeout = timeout,
                         .new_connections = false,
                         .client_go_retry_after = true};
    e2e::set_client_auth(server, so);
    slow.emplace(so);
    // Its second connection opens once the first has had its first answer.
    const auto on_both_nodes = [&] {
      std::set<std::string> nodes;
      for (const auto& r : slow->records()) nodes.insert(r.backend);
      return nodes.size() == 2;
    };
    if (!wait_until(on_both_nodes, 20s)) return fail("the slow client is not on both nodes");
  }
  e2e::load_options lopts{.port = fe_port,
                          .target = is_etcd_scenario(name) ? kEtcdBackedTarget : "/version",
                          .rate = s.rate,
                          .timeout = timeout,
                          .client_go_retry_after = is_openshift_scenario(name)};
  e2e::set_client_auth(server, lopts);
  e2e::load_client load(lopts);
  sleep_s(s.lead_s);
  const pid_t api_pid = *read_pid(pidfile);
  if (shim && is_real_node_scenario(name)) res.said = read_shim_said(a_shim, name);
  std::optional<std::uint64_t> reboot_target_us;
  const auto lb_bound = std::chrono::milliseconds(
      std::llround((parse_seconds(s.inter) * (s.fall + s.rise + 2) + 10) * 1000));
  std::uint64_t last_event = 0;
  if (is_drill_scenario(name)) {
    // The drill waits for its end and prints its result as JSON.
    res.t0_us = sandbox::monotonic_us();
    res.markers.push_back({"drill requested", res.t0_us});
    const auto drill = run_to_file(
        {tools.shim, "drill", "--duration=" + seconds(s.drill_s),
         fmt::format("--lb-fall={}", s.fall), "--json",
         "--state-dir=" + (a.dir() / "runtime").string()},
        out / "drill.json", std::chrono::milliseconds(std::llround((s.drill_s + 30) * 1000)));
    if (drill.exit_code < 0) return fail("the drill did not end");
    scenario_result::drill_figures d;
    d.exit_code = drill.exit_code;
    const std::string json = drill.text;
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
    } else if (stopped_on_reboot(name)) {
      a.set_stop_on_reboot({api_pid},
                           std::chrono::microseconds(std::llround(s.stop_timeout_s * 1e6)));
    } else if (kubelet) {
      std::vector<pid_t> pids = {api_pid};
      if (shim_process) pids.push_back(shim_process->pid());
      pids.push_back(kubelet->pid());
      a.set_kill_on_reboot(pids);
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
    reboot_target_us = start->usec;
    if (kubelet && stopped_on_reboot(name)) {
      // kubelet goes down with the node and starts nothing again: a real one exits at its SIGTERM
      // and leaves its containers to the runtime's stop; the stand-in would kill them at its
      // SIGTERM, so it gets a SIGKILL, which leaves them.
      kubelet->signal(SIGKILL);
    }

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
      if (stopped_on_reboot(name)) sleep_s(s.stop_timeout_s);
      if ((stopped_on_reboot(name) || runs_static_pods(name)) &&
          !wait_until([&] { return !a.killed_on_reboot().empty(); }, 10s))
        return fail("the stand-in manager never killed the node");
      // The power-off ends whatever still runs in kubelet's process group (its pods).
      if (runs_static_pods(name)) kubelet->kill_and_reap();
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
  if (go_agents) {
    go_agents->stop();
    res.go_agents = go_agents->verdicts();
  }
  if (slow) {
    slow->stop();
    const auto held = slow->records();
    res.notes.push_back(fmt::format(
        "the slow client ({}, one kept-alive connection per node): {} requests, {} failed, {} "
        "waited out a Retry-After; counted in the table",
        kSlowTarget, held.size(),
        std::count_if(held.begin(), held.end(), [](const auto& r) { return r.failed(); }),
        std::count_if(held.begin(), held.end(), [](const auto& r) { return r.waited_out > 0; })));
    res.records.insert(res.records.end(), held.begin(), held.end());
  }
  // When a request met the shutdown's 429 (its send; the answer came at once).
  for (const auto& r : res.records) {
    if (r.waited_out) res.markers.push_back({"a request met the 429 and waits it out", r.send_us});
  }
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
      if (e.event == "DrainElapsed" && !res.drain_elapsed_us) res.drain_elapsed_us = e.monotonic_us;
      res.target_restarted_events += e.event == "TargetRestarted";
      // shim-gns*: the policy at work (kubelet's SIGTERM counted as the shim's); a kube-apiserver
      // that kubelet started again during the hold, and its own signal (issue 32).
      if (e.event == "SignalLeftToKubelet" || e.event == "TargetRestarted")
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
    for (const auto& l : signals) {
      if (l.word == "SIGTERM" && !res.first_sigterm_us) res.first_sigterm_us = l.usec;
    }
    std::string exits;
    for (const auto& l : sandbox::read_timed_lines(lifecycle_log)) {
      if (l.word == "EXIT") exits += (exits.empty() ? "" : ",") + l.detail;
    }
    if (!exits.empty()) res.apiserver_exit = exits;
    if (shim && unready && res.first_sigterm_us) {
      res.sigterm_after_unready_s =
          (static_cast<double>(*res.first_sigterm_us) - static_cast<double>(*unready)) / 1e6;
    }
  }
  // etcd's signals (the etcd scenarios), as the stand-in logs them.
  for (const auto& l : sandbox::read_timed_lines(a.dir() / "etcd-signals.log")) {
    res.markers.push_back({"etcd " + l.word, l.usec});
  }
  // kubelet's signals ("SIGTERM pid" with one target, "SIGTERM name pid" with pods) and its
  // restarts of a static pod.
  for (const auto& l : sandbox::read_timed_lines(kubelet_log)) {
    const auto blank = l.detail.find(' ');
    const std::string pod = blank == std::string::npos ? std::string() : l.detail.substr(0, blank);
    if (l.word == "SIGTERM" || l.word == "SIGKILL") {
      res.markers.push_back(
          {"kubelet sends " + l.word + (pod.empty() ? "" : " to " + pod), l.usec});
    } else if (l.word == "POD_STARTED" && l.usec > res.t0_us) {
      res.markers.push_back({"kubelet starts " + pod + " again", l.usec});
    }
  }
  if (runs_static_pods(name) && reboot_target_us) {
    res.processes = static_pod_processes(kubelet_log, signal_log, lifecycle_log, *reboot_target_us);
    for (const auto& p : res.processes) {
      const auto at = [&](const std::optional<std::uint64_t>& us) {
        return us ? fmt::format(" at {:+.3f} s", seconds_since(res.t0_us, *us)) : std::string();
      };
      res.notes.push_back(
          fmt::format("kube-apiserver pid {} (started {:+.3f} s): {} SIGTERM{}, exit {}{}", p.pid,
                      seconds_since(res.t0_us, p.started_us), p.sigterms, at(p.sigterm_us), p.exit,
                      at(p.exit_us)));
    }
  }
  if (shim && is_restart_scenario(name)) {
    res.report_json =
        run_to_file({tools.shim, "report", "--event-log=" + event_log.string(), "--json"},
                    out / "report.json", 30s)
            .text;
    res.notes.push_back(fmt::format("the shim's TargetRestarted records: {}; report --json: {}",
                                    res.target_restarted_events,
                                    res.report_json.substr(0, res.report_json.find('\n'))));
  }
  if (res.said) {
    res.notes.push_back(fmt::format("before the reboot the shim said: {} {}; {}", res.said->metric,
                                    res.said->value ? fmt::format("{}", *res.said->value) : "-",
                                    res.said->line));
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
       {event_log, signal_log, lifecycle_log, kubelet_log, kubelet_config, static_pod_manifest,
        pods_file, a.dir() / "etcd-signals.log", a.dir() / "etcd-lifecycle.log"})
    fs::copy_file(f, out / f.filename(), fs::copy_options::overwrite_existing, ec);
  fs::copy(static_pod_dir, out / static_pod_dir.filename(),
           fs::copy_options::overwrite_existing | fs::copy_options::recursive, ec);
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
      "kube-apiserver: {}. HAProxy mode {}, {}, inter {} fall {} rise {}; drain and apiserver "
      "shutdown delay {} s; "
      "{} req/s on new connections, up to {} req/s on each of two keep-alive connections; "
      "{} ms per request; a request unanswered after {} s fails ({} s in the hang scenarios). "
      "Fault scenarios: SIGKILL and a restart {} s later, SIGSTOP for {} s; the checks' upstream "
      "probe every {} s, timeout {} s, fall {}; the apiserver-crash pair without LB retries. "
      "Real-node scenarios (issue 32): HAProxy retries {} without redispatch; kube-apiserver's "
      "shutdown delay 0 (kubeadm's) in the kubeadm and kubelet-restart ones; the openshift pair "
      "with --shutdown-send-retry-after and a client that waits out a Retry-After as client-go "
      "does (\"waited out\": the field's samplers count those requests as failed too); the "
      "gns-etcd ones GET {}\n\n",
      s.real_server
          ? "realapi (k8s.io/apiserver 0.36.4) over TLS, clients with a bearer token, and "
            "per node a naive and a retrying client-go agent through the LB (HTTP/2)"
          : "the stand-in (tests/sandbox/fake_apiserver)",
      s.lb_mode,
      s.lb_retries ? fmt::format("retries {} with redispatch", s.lb_retries) : "no retries",
      s.inter, s.fall, s.rise, s.drain_s, s.rate, s.rate, s.request_time_s * 1e3,
      s.request_timeout_s, s.hang_request_timeout_s, s.restart_after_s, s.hang_s,
      s.upstream_interval_s, s.upstream_timeout_s, s.upstream_fall, kRealNodeLbRetries,
      kEtcdBackedTarget);
  t += "| scenario | requests | failed | failed by kind | longest failure run (ms) | "
       "first to last failure (ms) | unready to LB down (ms) | reboot hold (s) | "
       "retried on a fresh conn | failed after the detection window | apiserver SIGTERMs | "
       "apiserver exit | SIGTERM after the shim's unready (s) | waited out (Retry-After) | "
       "client-go agents failed / Degraded, naive | retrying |\n";
  t += "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
       "--- | ---: | ---: |\n";
  for (const auto& r : results) {
    const std::string kinds = r.problems.empty() ? e2e::failed_by_kind_text(r.records)
                                                 : "RUN FAILED: " + r.problems.front();
    t += fmt::format(
        "| {} | {} | {} | {} | {:.0f} | {:.0f} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} "
        "|\n",
        r.name, r.records.size(), r.failed(), kinds, r.longest_failure_run_ms(),
        r.failure_window_ms(), optional_ms(r.unready_to_lb_down_ms),
        r.hold_s ? fmt::format("{:.3f}", *r.hold_s) : "-", r.retried(),
        r.detection_window_s
            ? fmt::format("{} (after {:.1f} s)", r.failed_after_window, *r.detection_window_s)
            : "-",
        r.apiserver_sigterms ? fmt::format("{}", *r.apiserver_sigterms) : "-", r.apiserver_exit,
        r.sigterm_after_unready_s ? fmt::format("{:.3f}", *r.sigterm_after_unready_s) : "-",
        is_openshift_scenario(r.name) ? e2e::waited_out_by_kind_text(r.records) : "-",
        e2e::go_agents_text(r.go_agents, "naive"), e2e::go_agents_text(r.go_agents, "retry"));
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

// The real-node scenarios' criteria beyond their failed requests (issue 32).
bool check_real_node(const settings& s, const scenario_result& r) {
  std::vector<std::string> why;
  const std::string& n = r.name;
  const auto one_sigterm_exit_0 = [&](std::string_view whose) {
    if (r.apiserver_sigterms != 1u || r.apiserver_exit != "0") {
      why.push_back(
          fmt::format("the apiserver got {} SIGTERMs and exited {} (want 1, {}, and exit 0)",
                      r.apiserver_sigterms.value_or(0), r.apiserver_exit, whose));
    }
  };
  // What the shim said just before the reboot: its metric, and words of its check's line.
  const auto said = [&](double value, const std::string& words) {
    if (!r.said) return why.push_back("the shim was not asked before the reboot");
    if (r.said->value != value) {
      why.push_back(fmt::format("before the reboot the shim's {} was {} (want {})", r.said->metric,
                                r.said->value ? fmt::format("{}", *r.said->value) : "missing",
                                value));
    }
    if (r.said->line.find(words) == std::string::npos) {
      why.push_back(fmt::format("before the reboot the shim's check {} did not say \"{}\": {}",
                                r.said->check, words, r.said->line));
    }
  };
  if (n == "shim-kubeadm") {
    one_sigterm_exit_0("the shim's");
    said(s.drain_s, "once the load balancer has drained");
    // ShutdownInitiated is stamped with the moment the drain counts from: a bound, not a speed.
    if (!r.sigterm_after_unready_s || *r.sigterm_after_unready_s < s.drain_s) {
      why.push_back(
          fmt::format("the SIGTERM came {} s after the shim's unready, before the drain "
                      "({} s) was over",
                      r.sigterm_after_unready_s.value_or(-1), s.drain_s));
    }
  } else if (n == "shim-kubeadm-lb-apiserver") {
    said(1, "WARNING: no load balancer probed this shim's /readyz");
  } else if (n == "shim-openshift") {
    one_sigterm_exit_0("the shim's");
    // The 429s are waited out (0 failed, as client-go sees it) and counted apart; none met would
    // leave the pair's point untested.
    if (std::none_of(r.records.begin(), r.records.end(),
                     [](const auto& q) { return q.waited_out > 0; }))
      why.push_back("no request met the 429 of --shutdown-send-retry-after: the test cannot tell");
    said(0, "covers the drain");
    // At +0: before the drain's end, told by the order of the two records, not by a time.
    if (!r.first_sigterm_us || !r.drain_elapsed_us || *r.first_sigterm_us >= *r.drain_elapsed_us)
      why.push_back("the SIGTERM did not come before the drain's end (its delay covers the drain)");
  } else if (n == "shim-kubelet-restart") {
    if (r.processes.size() < 2) {
      why.push_back(
          fmt::format("{} kube-apiserver process(es) before reboot.target: kubelet did not "
                      "restart it during the hold, the test cannot tell",
                      r.processes.size()));
    }
    for (const auto& p : r.processes) {
      if (p.sigterms != 1 || p.exit != "0" || !p.exit_us) {
        why.push_back(
            fmt::format("kube-apiserver pid {} got {} SIGTERMs and exited {} before "
                        "reboot.target (want 1 and exit 0)",
                        p.pid, p.sigterms, p.exit));
      }
    }
    const std::size_t restarts = r.processes.empty() ? 0 : r.processes.size() - 1;
    if (r.target_restarted_events != restarts) {
      why.push_back(
          fmt::format("the shim recorded {} TargetRestarted, kubelet restarted it {} "
                      "time(s) during the hold",
                      r.target_restarted_events, restarts));
    }
    if (r.report_json.find(fmt::format("\"targets_restarted\":{}", restarts)) ==
        std::string::npos) {
      why.push_back(fmt::format("report --json does not say targets_restarted {}: {}", restarts,
                                r.report_json));
    }
  } else if (n == "shim-gns-etcd") {
    one_sigterm_exit_0("kubelet's");
    said(1, "WARNING: kubelet stops etcd");
    // It names the fix that shim-gns-etcd-fixed applies.
    said(1, "its manifest's priorityClassName: system-cluster-critical with priority: 2000000000");
    const auto fix = etcd_scenario_groups(s, "shim-gns-etcd-fixed");
    said(1, fmt::format("{{priority: {}, shutdownGracePeriodSeconds: {}}} and {{priority: {}, "
                        "shutdownGracePeriodSeconds: {}}}",
                        fix[0].priority, fix[0].grace_s, fix[1].priority, fix[1].grace_s));
  } else if (n == "shim-gns-etcd-fixed") {
    one_sigterm_exit_0("kubelet's");
    said(0, "kubelet");
    if (r.said && r.said->line.find("kubelet stops etcd") != std::string::npos)
      why.push_back("the shim still warns of etcd: " + r.said->line);
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
  // realapi serves TLS only, with the run's certificate; the stand-in plain HTTP.
  const e2e::api_server server =
      e2e::make_api_server(s, sandbox::tool_paths::from_environment().fake_apiserver,
                           s.real_server ? s.out_dir / "pki" : fs::path());

  std::vector<scenario_result> results;
  for (const auto& name : s.scenarios) {
    fmt::print("--- {}\n", name);
    std::fflush(stdout);
    try {
      results.push_back(run_scenario(s, server, name, self));
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
    if (!r.go_agents.empty()) {
      fmt::print("  client-go agents (failed of requests / Degraded): naive {}, retrying {}\n",
                 e2e::go_agents_text(r.go_agents, "naive"),
                 e2e::go_agents_text(r.go_agents, "retry"));
    }
    if (r.apiserver_sigterms) {
      fmt::print("  node A's apiserver: SIGTERMs {}, exit {}\n", *r.apiserver_sigterms,
                 r.apiserver_exit);
    }
    if (r.name == "shim-cancel") {
      fmt::print("  node A answered {} requests after the cancel\n", r.node_a_answers_after_cancel);
    }
    if (r.drill) fmt::print("  {}\n", drill_line(*r.drill));
    for (const auto& note : r.notes) fmt::print("  {}\n", note);
  }
  std::string summary = table(s, results);
  for (const auto& r : results) {
    if (r.drill) summary += "\n" + r.name + ": " + drill_line(*r.drill) + "\n";
    for (const auto& note : r.notes) summary += "\n" + r.name + ": " + note + "\n";
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
      } else if (is_shim_scenario(r.name) && !failures_reported(r.name)) {
        if (r.failed() != 0) {
          fmt::print("FAIL {}: {} failed requests with the shim (want 0)\n", r.name, r.failed());
          ok = false;
        }
        // Against realapi, client-go's agents as well: nothing failed, no naive one Degraded.
        if (s.real_server && (e2e::go_agents_text(r.go_agents, "naive") == "-" ||
                              e2e::go_agents_text(r.go_agents, "retry") == "-")) {
          fmt::print("FAIL {}: a client-go agent policy sent nothing: the test cannot tell\n",
                     r.name);
          ok = false;
        }
        const auto go_failed = e2e::go_agents_failed(r.go_agents);
        const auto go_degraded = e2e::go_agents_degraded(r.go_agents, "naive");
        if (go_failed != 0 || go_degraded != 0) {
          fmt::print(
              "FAIL {}: the client-go agents had {} failed requests and {} naive Degraded "
              "transitions with the shim (want 0)\n",
              r.name, go_failed, go_degraded);
          ok = false;
        }
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
      if (is_real_node_scenario(r.name) && !check_real_node(s, r)) ok = false;
      if (r.name == "shim-cancel" && r.node_a_answers_after_cancel == 0) {
        fmt::print("FAIL {}: node A never answered again after the cancel\n", r.name);
        ok = false;
      }
    }
  }
  sandbox::reap_orphans();
  return ok ? 0 : 1;
}
