// Issues 13 and 19: the shim on a node where kubelet's graceful node shutdown (GNS) holds a delay
// lock of its own and stops kube-apiserver's static pod itself. fake_kubelet (tests/sandbox) plays
// kubelet on the real logind: same lock, and at PrepareForShutdown(true) a SIGTERM to the
// container's PID 1 after --sigterm-delay (its priority group's turn), a SIGKILL --grace later, or
// with --crash-after an exit without either. A static pod without `priority` falls in the lowest
// priority group, which kubelet stops first: SIGTERM at +0 (kubernetes#113940, #133442); kubeadm's
// current manifest and OpenShift's say `priority: 2000001000`: the critical group, later.
//
// Suites:
//  - KubeletStandIn: fake_kubelet itself looks to logind as kubelet does, and raises logind's
//    InhibitDelayMaxSec with 99-kubelet.conf as kubelet does (or fails as kubelet fails).
//  - ShimKubeletWrapper: wrapper mode, where kubelet's SIGTERM reaches the shim (the container's
//    PID 1), which forwards once: one SIGTERM reaches the apiserver today.
//  - ShimKubelet: attach and sidecar mode with --kubelet-config and --static-pod-manifest, the
//    policy of src/kubelet/kubelet_outlook.hpp: whichever group kubelet stops kube-apiserver in,
//    the shim sends no signal and kubelet's is the one (the base shim gave 2 SIGTERMs in the first
//    group, and issue 13's shim 2 in a later one: exit 1 on the second); a kubelet gone before its
//    SIGTERM means the shim's one, at once, never a second after a restart; a SIGKILL before the
//    drain is over is reported before the shutdown and shown in the event log after it.

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

// kube-apiserver keeps serving this long after its first SIGTERM (--shutdown-delay-duration): long
// enough that an exit before it can only be the one a second signal causes.
constexpr const char* kApiserverDelay = "6s";
constexpr const char* kDrain = "3s";
constexpr const char* kExitTimeout = "15s";
// kubelet's grace for the apiserver's group, far beyond the apiserver's own exit: no SIGKILL here.
constexpr const char* kKubeletGrace = "20s";
// "+0" for the first priority group is kubelet's path to the container: pod worker, CRI
// StopContainer, the runtime's kill (the trial used 0.3 s). Not 0: two SIGTERMs sent 0.4 ms
// apart reached fake_apiserver as one (measured with the base shim: the kernel merges a pending
// signal with a second one), which would hide the double signal by luck rather than by design.
constexpr const char* kKubeletFirstGroup = "300ms";

struct kubelet_standin {
  sandbox::child_process* process = nullptr;
  std::filesystem::path log;

  std::vector<sandbox::timed_line> lines() const { return sandbox::read_timed_lines(log); }
  std::size_t count(const std::string& word) const {
    std::size_t n = 0;
    for (const auto& l : lines()) n += l.word == word;
    return n;
  }
  std::optional<std::uint64_t> first(const std::string& word) const {
    for (const auto& l : lines()) {
      if (l.word == word) return l.usec;
    }
    return std::nullopt;
  }
};

// kubelet's files as the shim reads them: a KubeletConfiguration and kube-apiserver's manifest.
struct kubelet_files {
  std::filesystem::path config;
  std::filesystem::path manifest;
  std::vector<std::string> flags() const {
    return {"--kubelet-config=" + config.string(), "--static-pod-manifest=" + manifest.string()};
  }
};

class KubeletTest : public ShimTest {
 protected:
  // Starts fake_kubelet against target (its --target-pid=... or --target-pidfile=...) and waits
  // for its lock in ListInhibitors.
  kubelet_standin start_kubelet(const std::string& target, const std::string& sigterm_delay,
                                const std::string& grace,
                                const std::vector<std::string>& extra = {}) {
    kubelet_standin k;
    k.log = sb().path("kubelet.log");
    std::vector<std::string> argv = {sb().tools().fake_kubelet,
                                     "--address=" + sb().bus_address(),
                                     target,
                                     "--sigterm-delay=" + sigterm_delay,
                                     "--grace=" + grace,
                                     "--log=" + k.log.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    k.process = &sb().spawn("fake-kubelet", argv);
    return k;
  }

  // Its lock is listed and it listens for PrepareForShutdown (it takes the lock first, as kubelet
  // does: a reboot in between would go unseen).
  bool wait_kubelet_lock(const kubelet_standin& k) {
    if (!sb().wait_for_inhibitor_of("kubelet", k.process->pid(), kStartTimeout)) return false;
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (k.count("WATCHING") == 0) {
      if (std::chrono::steady_clock::now() > deadline || !k.process->running()) return false;
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

  // Reboot, then wait (bounded) until logind starts reboot.target: both locks are gone by then.
  std::uint64_t reboot_until_target(bool* reached) {
    const auto t0 = sb().reboot();
    *reached = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0).has_value();
    return t0;
  }

  // groups: the shutdownGracePeriodByPodPriority entries (priority, seconds); priority: the static
  // pod's, none when nullopt; the pod's terminationGracePeriodSeconds.
  kubelet_files write_kubelet_files(const std::vector<std::pair<long, long>>& groups,
                                    std::optional<long> priority, long pod_grace_seconds) {
    kubelet_files f{sb().path("kubelet-config.yaml"), sb().path("kube-apiserver.yaml")};
    std::string config =
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "shutdownGracePeriodByPodPriority:\n";
    for (const auto& [p, seconds] : groups) {
      config += fmt::format("  - priority: {}\n    shutdownGracePeriodSeconds: {}\n", p, seconds);
    }
    std::ofstream(f.config) << config;
    std::ofstream(f.manifest) << fmt::format(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: "
        "kube-system\nspec:\n{}  priorityClassName: system-node-critical\n"
        "  terminationGracePeriodSeconds: {}\n  containers:\n  - name: kube-apiserver\n"
        "    image: registry.k8s.io/kube-apiserver:v1.35.0\n",
        priority ? fmt::format("  priority: {}\n", *priority) : "", pod_grace_seconds);
    return f;
  }

  // One node of a ShimKubelet case: the apiserver, the shim attached to it with shim_flags, then
  // the stand-in kubelet, which takes its lock after the shim's; line: the shim's kubelet-shutdown
  // line once it says `expect`. A step that fails is a test failure; callers stop on HasFailure().
  struct gns_node {
    apiserver api;
    shim s;
    kubelet_standin k;
    std::string line;
  };
  gns_node start_gns_node(const std::vector<std::string>& shim_flags, const std::string& drain,
                          const std::string& exit_timeout, const std::string& sigterm_delay,
                          const std::string& grace, const std::string& expect,
                          const std::string& forward_on_sigterm = "auto",
                          const std::vector<std::string>& kubelet_flags = {},
                          const std::string& apiserver_delay = kApiserverDelay) {
    gns_node n;
    n.api = start_apiserver("kube-apiserver", api_delay(apiserver_delay));
    if (HasFailure()) return n;
    auto o = attach_to(n.api, drain, exit_timeout);
    o.extra_flags = shim_flags;
    o.forward_on_sigterm = forward_on_sigterm;
    n.s = start_shim(o);
    if (HasFailure()) return n;
    if (!wait_shim_lock_of(n.s)) {
      ADD_FAILURE() << "the shim never took its lock";
      return n;
    }
    n.k = start_kubelet("--target-pidfile=" + n.api.pidfile.string(), sigterm_delay, grace,
                        kubelet_flags);
    if (!wait_kubelet_lock(n.k)) {
      ADD_FAILURE() << "the stand-in never took its lock";
      return n;
    }
    n.line = wait_check_line(n.s, "kubelet-shutdown", expect);
    note("kubelet-shutdown: " + n.line);
    return n;
  }

  // The apiserver had one SIGTERM, kubelet's, no earlier than its group's turn (sigterm_delay_s
  // after the reboot at t0, the end of kubelet's window) and exited 0 (exit 1 is its answer to a
  // second one); the event log shows kubelet's signal counted with its window, none of the shim's,
  // and a hold released only once the apiserver had exited.
  void expect_kubelets_signal_only(const shim& s, const apiserver& api, const kubelet_standin& k,
                                   std::uint64_t t0, unsigned sigterm_delay_s) {
    EXPECT_EQ(k.count("SIGTERM"), 1u) << "kubelet's stand-in never signalled the apiserver";
    const auto sigs = api.signals();
    ASSERT_EQ(sigs.size(), 1u) << "the apiserver must get exactly one SIGTERM";
    EXPECT_GE(sigs[0].usec, t0 + sigterm_delay_s * 1'000'000u)
        << "a SIGTERM before kubelet's group's turn";
    ASSERT_FALSE(api.lifecycle().empty());
    EXPECT_EQ(api.lifecycle().back().word, "EXIT");
    EXPECT_EQ(api.lifecycle().back().detail, "0");
    EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
    ASSERT_EQ(s.count_events("SignalLeftToKubelet"), 1u);
    const auto left = s.first_event("SignalLeftToKubelet");
    EXPECT_EQ(sandbox::json_string_field(left->line, "kubelet_sigterm_earliest_s"), "0");
    EXPECT_EQ(sandbox::json_string_field(left->line, "kubelet_sigterm_latest_s"),
              std::to_string(sigterm_delay_s));
    const auto expected = s.first_event("KubeletShutdown");
    ASSERT_TRUE(expected);
    EXPECT_EQ(sandbox::json_string_field(expected->line, "shim_signals"), "false");
    const auto released = s.first_event("InhibitorReleased");
    ASSERT_TRUE(released);
    ASSERT_TRUE(api.lifecycle_at("EXIT"));
    EXPECT_GE(released->monotonic_us, *api.lifecycle_at("EXIT"));
  }

  // "FIGURES ..." with every SIGTERM the apiserver logged and kubelet's, relative to the reboot.
  void print_figures(const std::string& name, std::uint64_t t0, const apiserver& api,
                     const kubelet_standin& k) {
    std::string line = fmt::format("FIGURES {} sigterm_count={}", name, api.signals().size());
    for (const auto& s : api.signals()) {
      line += fmt::format(" apiserver_{}_ms={:.1f}", s.word, ms_between(t0, s.usec));
    }
    for (const auto& l : k.lines()) {
      if (l.word == "SIGTERM" || l.word == "SIGKILL" || l.word == "CRASH") {
        line += fmt::format(" kubelet_{}_ms={:.1f}", l.word, ms_between(t0, l.usec));
      }
    }
    if (auto exit = api.lifecycle_at("EXIT")) {
      line += fmt::format(" apiserver_exit_ms={:.1f}", ms_between(t0, *exit));
    }
    for (const auto& l : api.lifecycle()) {
      if (l.word == "EXIT") line += " apiserver_exit_code=" + l.detail;
    }
    std::cout << line << std::endl;
    note(line);
  }
};

class KubeletStandIn : public KubeletTest {};
class ShimKubeletWrapper : public KubeletTest {};
class ShimKubelet : public KubeletTest {};

TEST_F(KubeletStandIn, TakesKubeletsLockAndStopsItsTargetAtTheShutdown) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet("--target-pidfile=" + api.pidfile.string(), "500ms", kKubeletGrace);
  ASSERT_TRUE(wait_kubelet_lock(k)) << "the stand-in never took its lock";
  const auto lock = sb().find_inhibitor("kubelet");
  ASSERT_TRUE(lock);
  // What `systemd-inhibit --list` shows for kubelet on a real node.
  EXPECT_EQ(lock->what, "shutdown");
  EXPECT_EQ(lock->why, "Kubelet needs time to handle node shutdown");
  EXPECT_EQ(lock->mode, "delay");

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  print_figures("standin", t0, api, k);
  EXPECT_TRUE(reached) << "no StartUnit(reboot.target): the stand-in kept its lock";
  ASSERT_EQ(api.signals().size(), 1u);
  // Not before its delay: the lower priority groups' turn.
  EXPECT_GE(api.signals()[0].usec, t0 + 500'000u);
  EXPECT_EQ(k.count("SIGKILL"), 0u) << "the target exited within the grace";
  EXPECT_EQ(k.count("TARGET_EXITED"), 1u);
  EXPECT_EQ(k.count("LOCK_RELEASED"), 1u);
}

TEST_F(KubeletStandIn, KillsATargetThatOutlivesTheGrace) {
  apiserver_options stubborn;
  stubborn.ignore_sigterm = true;
  auto api = start_apiserver("kube-apiserver", stubborn);
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet("--target-pidfile=" + api.pidfile.string(), "0s", "1s");
  ASSERT_TRUE(wait_kubelet_lock(k));

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  print_figures("standin_kill", t0, api, k);
  EXPECT_TRUE(reached);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout));
  EXPECT_FALSE(api.process->running());
  ASSERT_EQ(k.count("SIGKILL"), 1u);
  std::uint64_t term_us = 0, kill_us = 0;
  for (const auto& l : k.lines()) {
    if (l.word == "SIGTERM") term_us = l.usec;
    if (l.word == "SIGKILL") kill_us = l.usec;
  }
  EXPECT_GE(kill_us, term_us + 1'000'000u) << "SIGKILL before the grace was over";
}

// A kubelet that dies during the shutdown, before its group's turn: no signal, and its lock goes
// with the process, so logind goes on.
TEST_F(KubeletStandIn, CrashesBeforeItsSigtermAndItsLockGoesWithIt) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet("--target-pidfile=" + api.pidfile.string(), "3s", kKubeletGrace,
                         {"--crash-after=500ms"});
  ASSERT_TRUE(wait_kubelet_lock(k));

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  print_figures("standin_crash", t0, api, k);
  EXPECT_TRUE(reached) << "no StartUnit(reboot.target): the crashed stand-in's lock stayed";
  const auto status = k.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 5) << sandbox::describe_wait_status(*status);
  ASSERT_EQ(k.count("CRASH"), 1u);
  EXPECT_EQ(k.count("SIGTERM"), 0u);
  EXPECT_EQ(k.count("LOCK_RELEASED"), 0u) << "a crash releases nothing itself";
  EXPECT_TRUE(api.signals().empty());
  EXPECT_FALSE(sb().find_inhibitor("kubelet"));
}

// logind's limit shorter than kubelet's whole shutdown: kubelet writes 99-kubelet.conf and reloads
// logind. The sandbox's own drop-in sorts before it here, so kubelet's value wins.
TEST_F(KubeletStandIn, RaisesLogindsInhibitDelayWith99KubeletConf) {
  auto o = logind_delay_max("5");
  o.logind_dropin_name = "10-node-sandbox.conf";
  make_sandbox(o);
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  ASSERT_FALSE(HasFailure());
  const auto conf_dir = sb().path("etc-systemd") / "logind.conf.d";
  auto k = start_kubelet("--target-pidfile=" + api.pidfile.string(), "5s", "20s",
                         {"--logind-conf-dir=" + conf_dir.string()});
  ASSERT_TRUE(wait_kubelet_lock(k)) << "the stand-in never took its lock";
  EXPECT_EQ(sandbox::read_text_file(conf_dir / "99-kubelet.conf"),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=25\n");
  EXPECT_EQ(sb().inhibit_delay_max_usec(), 25'000'000u);
}

// The same with a drop-in that sorts after kubelet's (unattended-upgrades' case,
// kubernetes#102818): kubelet's shutdown manager fails to start and takes no lock.
TEST_F(KubeletStandIn, FailsWithoutALockWhenLogindKeepsAShorterDelay) {
  make_sandbox(logind_delay_max("5"));
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  ASSERT_FALSE(HasFailure());
  auto k =
      start_kubelet("--target-pidfile=" + api.pidfile.string(), "5s", "20s",
                    {"--logind-conf-dir=" + (sb().path("etc-systemd") / "logind.conf.d").string()});
  auto status = k.process->wait_for_exit(kEventTimeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(sandbox::shell_exit_code(*status), 3) << sandbox::describe_wait_status(*status);
  EXPECT_FALSE(sb().find_inhibitor("kubelet"));
}

// Wrapper mode: the runtime's SIGTERM goes to the container's PID 1, the shim, which forwards at
// most once; its own PrepareForShutdown signal and kubelet's are the same one.
TEST_F(ShimKubeletWrapper, StaticPodStoppedFirstGivesTheApiserverOneSigterm) {
  auto api = describe_apiserver("kube-apiserver", api_delay(kApiserverDelay));
  shim_options o;
  o.drain_delay = kDrain;
  o.exit_timeout = kExitTimeout;
  o.wrapped_command = api.argv;
  auto s = start_shim(o);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_apiserver_listening(api));
  ASSERT_TRUE(wait_shim_lock_of(s));
  auto k = start_kubelet(fmt::format("--target-pid={}", s.process->pid()), kKubeletFirstGroup,
                         kKubeletGrace);
  ASSERT_TRUE(wait_kubelet_lock(k));

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  ASSERT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the shim outlived its child";
  print_figures("gns_wrapper", t0, api, k);
  EXPECT_TRUE(reached);
  EXPECT_EQ(k.count("SIGTERM"), 1u) << "kubelet's stand-in never signalled the shim";
  EXPECT_EQ(api.signals().size(), 1u) << "the apiserver must get exactly one SIGTERM";
  const auto exit = api.lifecycle();
  ASSERT_FALSE(exit.empty());
  EXPECT_EQ(exit.back().word, "EXIT");
  EXPECT_EQ(exit.back().detail, "0") << "exit 1 is the apiserver's answer to a second signal";
}

// Attach mode, static pod without priority: kubelet's SIGTERM at +0. The policy (issue 13, item 2):
// the shim sees kubelet's lock and files, sends nothing itself, and counts kubelet's signal as the
// forwarded one. The base shim gave 2 SIGTERMs here.
TEST_F(ShimKubelet, StaticPodStoppedFirstGivesTheApiserverOneSigterm) {
  // kubelet's first group (priority 0) has 20 s, the pod as long: no SIGKILL within 3 s + 15 s.
  const auto files = write_kubelet_files({{0, 20}, {2000000000, 5}}, std::nullopt, 20);
  auto [api, s, k, line] = start_gns_node(files.flags(), kDrain, kExitTimeout, kKubeletFirstGroup,
                                          kKubeletGrace, "the shim sends no signal of its own");
  ASSERT_FALSE(HasFailure());
  EXPECT_THAT(line,
              testing::HasSubstr("SIGTERM reaches kube-apiserver at +0s and its SIGKILL at +20s"));
  EXPECT_THAT(line, testing::StartsWith("[+]kubelet-shutdown ok"));
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_cuts_drain"), 0.0);
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_second_signal"), 0.0);

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout)) << "the apiserver never exited";
  print_figures("gns_attach", t0, api, k);
  EXPECT_TRUE(reached);
  EXPECT_EQ(k.count("SIGTERM"), 1u) << "kubelet's stand-in never signalled the apiserver";
  EXPECT_EQ(api.signals().size(), 1u)
      << "the apiserver must get exactly one SIGTERM (kubelet's and the shim's add up)";
  const auto exit = api.lifecycle();
  ASSERT_FALSE(exit.empty());
  EXPECT_EQ(exit.back().word, "EXIT");
  EXPECT_EQ(exit.back().detail, "0") << "exit 1 is the apiserver's answer to a second signal";
  // What the event log says: what kubelet was expected to do, and whose signal counted.
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
  EXPECT_EQ(s.count_events("SignalLeftToKubelet"), 1u);
  const auto expected = s.first_event("KubeletShutdown");
  ASSERT_TRUE(expected);
  EXPECT_EQ(sandbox::json_string_field(expected->line, "shim_signals"), "false") << expected->line;
  EXPECT_EQ(sandbox::json_string_field(expected->line, "kubelet_cuts_drain"), "false")
      << expected->line;
  // The hold lasted the drain: the apiserver served for its whole shutdown delay behind it.
  const auto released = s.first_event("InhibitorReleased");
  ASSERT_TRUE(released);
  EXPECT_GE(released->monotonic_us, t0 + 3'000'000u);
}

// Sidecar mode: the shim is a container of kube-apiserver's static pod, so kubelet's stop reaches
// both containers at once (the manifest's --forward-on-sigterm=never keeps the shim's own SIGTERM
// from becoming a second signal). The apiserver gets kubelet's SIGTERM only, and the shim holds
// the reboot until it has exited, then exits itself.
TEST_F(ShimKubelet, SidecarStoppedWithItsPodHoldsAndSendsNothing) {
  const auto files = write_kubelet_files({{0, 20}, {2000000000, 5}}, std::nullopt, 20);
  auto [api, s, k, line] =
      start_gns_node(files.flags(), kDrain, kExitTimeout, kKubeletFirstGroup, kKubeletGrace,
                     "the shim sends no signal of its own", "never");
  ASSERT_FALSE(HasFailure());

  const auto t0 = sb().reboot();
  // The runtime stops the pod's other container, the shim, as it stops kube-apiserver.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.process->signal(SIGTERM);
  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout)) << "the apiserver never exited";
  print_figures("gns_sidecar", t0, api, k);
  EXPECT_TRUE(start) << "no StartUnit(reboot.target)";
  EXPECT_EQ(api.signals().size(), 1u) << "kubelet's SIGTERM only";
  ASSERT_FALSE(api.lifecycle().empty());
  EXPECT_EQ(api.lifecycle().back().detail, "0");
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
  EXPECT_EQ(s.count_events("SignalLeftToKubelet"), 1u);
  // The shim's own SIGTERM did not cut the hold: released once the apiserver had exited.
  const auto released = s.first_event("InhibitorReleased");
  ASSERT_TRUE(released);
  ASSERT_TRUE(api.lifecycle_at("EXIT"));
  EXPECT_GE(released->monotonic_us, *api.lifecycle_at("EXIT"));
  EXPECT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the stopped shim never exited";
}

// Without kubelet's files the shim cannot tell, keeps signalling at +0 and says why, with the fix.
TEST_F(ShimKubelet, KubeletsLockWithoutItsConfigIsAWarning) {
  auto api = start_apiserver("kube-apiserver", api_delay(kApiserverDelay));
  ASSERT_FALSE(HasFailure());
  auto s = start_shim(attach_to(api, kDrain, kExitTimeout));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));
  auto check = wait_shim_answer(s, "/readyz?verbose");
  ASSERT_TRUE(check);
  EXPECT_FALSE(readyz_check_line(check->body, "kubelet-shutdown"))
      << "no kubelet and no files: nothing to say";
  auto k =
      start_kubelet("--target-pidfile=" + api.pidfile.string(), kKubeletFirstGroup, kKubeletGrace);
  ASSERT_TRUE(wait_kubelet_lock(k));
  const auto line = wait_check_line(s, "kubelet-shutdown", "without --kubelet-config");
  note("kubelet-shutdown: " + line);
  EXPECT_THAT(line, testing::HasSubstr(fmt::format("kubelet (pid {})", k.process->pid())));
  EXPECT_THAT(line, testing::HasSubstr("give --kubelet-config and --static-pod-manifest"));
  EXPECT_TRUE(wait_shim_ready(s)) << "informational: never a readiness failure";
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_second_signal"), 1.0)
      << "the shim signals at +0 and kubelet may too";
  const auto log = sandbox::read_text_file(s.log);
  // A WARNING, in the JSON lines the harness asks for.
  EXPECT_THAT(log, testing::HasSubstr("\"level\":\"warning\",\"msg\":\"kubelet (pid"));
  // kubelet stops: its lock goes, and with no files given there is nothing left to say.
  k.process->stop();
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  std::optional<std::string> left = line;
  while (left && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    if (auto r = wait_shim_answer(s, "/readyz?verbose")) {
      left = readyz_check_line(r->body, "kubelet-shutdown");
    }
  }
  EXPECT_FALSE(left) << "kubelet's lock is gone but the shim still says: " << *left;
}

// kube-apiserver in a later priority group, as kubeadm's manifest (`priority: 2000001000`) and
// OpenShift's put it: kubelet's SIGTERM comes after the lower groups (here 3 s, the drain). This
// case showed the old policy (issue 13): the shim signalled at +0 and reported kubelet's SIGTERM as
// a second one, and two reached the apiserver, which exited at once on the second. Now (issue 19)
// the shim leaves the signal to kubelet whatever its group: one SIGTERM, kubelet's, at +3 s, which
// still starts the apiserver's graceful termination while the shim's /readyz is unready from +0.
TEST_F(ShimKubelet, PriorityInALaterGroupLeavesTheSignalToKubelet) {
  const auto files = write_kubelet_files({{0, 3}, {2000000000, 20}}, 2000001000, 20);
  auto [api, s, k, line] = start_gns_node(files.flags(), kDrain, kExitTimeout, kDrain,
                                          kKubeletGrace, "the shim sends no signal of its own");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_second_signal"), 0.0);
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_cuts_drain"), 0.0);

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout));
  print_figures("gns_attach_priority", t0, api, k);
  EXPECT_TRUE(reached);
  expect_kubelets_signal_only(s, api, k, t0, 3);
}

// The same node with the shim as a sidecar of kube-apiserver's static pod: kubelet stops the whole
// pod when its group's turn comes, the shim's container with it (--forward-on-sigterm=never).
TEST_F(ShimKubelet, PriorityInALaterGroupSidecarLeavesTheSignalToKubelet) {
  const auto files = write_kubelet_files({{0, 3}, {2000000000, 20}}, 2000001000, 20);
  auto [api, s, k, line] =
      start_gns_node(files.flags(), kDrain, kExitTimeout, kDrain, kKubeletGrace,
                     "the shim sends no signal of its own", "never");
  ASSERT_FALSE(HasFailure());

  const auto t0 = sb().reboot();
  // The runtime stops the pod's other container, the shim, as it stops kube-apiserver.
  const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
  while (k.count("SIGTERM") == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  s.process->signal(SIGTERM);
  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout)) << "the apiserver never exited";
  print_figures("gns_sidecar_priority", t0, api, k);
  EXPECT_TRUE(start) << "no StartUnit(reboot.target)";
  expect_kubelets_signal_only(s, api, k, t0, 3);
  EXPECT_TRUE(s.process->wait_for_exit(kEventTimeout)) << "the stopped shim never exited";
}

// kubelet dies before its group's turn (here at +1.5 s of its 3 s): its lock goes with it, and
// nobody else will signal kube-apiserver. The shim sends its one SIGTERM as soon as logind's list
// no longer shows kubelet's lock, and none before.
TEST_F(ShimKubelet, KubeletGoneBeforeItsSigtermTheShimSignalsAtOnce) {
  const auto files = write_kubelet_files({{0, 3}, {2000000000, 20}}, 2000001000, 20);
  auto n = start_gns_node(files.flags(), kDrain, kExitTimeout, kDrain, kKubeletGrace,
                          "the shim sends no signal of its own", "auto", {"--crash-after=1500ms"});
  ASSERT_FALSE(HasFailure());

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  ASSERT_TRUE(n.api.process->wait_for_exit(kEventTimeout));
  print_figures("gns_kubelet_gone", t0, n.api, n.k);
  EXPECT_TRUE(reached);
  EXPECT_EQ(n.k.count("SIGTERM"), 0u) << "the stand-in signalled before its crash";
  const auto crash = n.k.first("CRASH");
  ASSERT_TRUE(crash) << "the stand-in never crashed";
  const auto signals = n.api.signals();
  ASSERT_EQ(signals.size(), 1u) << "one SIGTERM, the shim's";
  // From the stand-in's last line (the exit that drops its lock follows it) to the apiserver's
  // SIGTERM: logind's drop of the lock, its PropertiesChanged, the shim's ListInhibitors, the
  // signal.
  const double reaction_ms = ms_between(*crash, signals[0].usec);
  std::cout << fmt::format("FIGURES gns_kubelet_gone_reaction_ms={:.1f}", reaction_ms) << std::endl;
  EXPECT_GE(signals[0].usec, *crash) << "the shim signalled before kubelet's lock went";
  EXPECT_LT(reaction_ms, 100.0) << "the issue's bound on the shim's reaction";
  EXPECT_EQ(n.api.lifecycle().back().detail, "0");
  EXPECT_EQ(n.s.count_events("SignalLeftToKubelet"), 1u);
  ASSERT_EQ(n.s.count_events("SignalForwarded"), 1u);
  const auto forwarded = n.s.first_event("SignalForwarded");
  EXPECT_EQ(sandbox::json_string_field(forwarded->line, "instead_of"), "kubelet");
}

// The shim's own signal after kubelet's lock went is recorded as the shim's: a shim killed and
// restarted after it resumes the hold and sends none.
TEST_F(ShimKubelet, ARestartAfterTheShimsOwnSignalSendsNone) {
  make_sandbox(logind_delay_max("300"));
  const auto files = write_kubelet_files({{0, 3}, {2000000000, 20}}, 2000001000, 20);
  auto n =
      start_gns_node(files.flags(), kDrain, "30s", kDrain, kKubeletGrace,
                     "the shim sends no signal of its own", "auto", {"--crash-after=1s"}, "20s");
  ASSERT_FALSE(HasFailure());
  // Keeps logind waiting once the shim is gone.
  auto harness_lock = sb().take_inhibitor("kubelet-restart", "keeps logind waiting");

  const auto t0 = sb().reboot();
  ASSERT_TRUE(wait_signal_count(n.api, 1)) << "nobody signalled after kubelet's crash";
  n.s.process->signal(SIGKILL);
  ASSERT_TRUE(n.s.process->wait_for_exit(kEventTimeout));
  auto s2 = restart_shim(n.s, /*wait_ready=*/false);
  ASSERT_TRUE(wait_event(s2, "ShutdownResumed")) << "the restarted shim did not resume the hold";
  // Past the end of the drain it resumed.
  while (sandbox::monotonic_us() < t0 + 5'000'000u) std::this_thread::sleep_for(50ms);
  const auto signals = n.api.signals().size();
  harness_lock.release();
  print_figures("gns_restart_after_own_signal", t0, n.api, n.k);
  EXPECT_EQ(signals, 1u) << "the restarted shim signalled the apiserver again";
  EXPECT_TRUE(n.api.process->running()) << "a second SIGTERM makes the apiserver exit at once";
  EXPECT_EQ(s2.count_events("SignalForwarded"), 1u) << "the first run's only";
}

// A shim restarted while the signal is left to kubelet goes on watching kubelet's lock: when
// kubelet dies before its SIGTERM, the restarted shim sends the one signal.
TEST_F(ShimKubelet, ARestartWhileLeftToKubeletStillSignalsWhenKubeletDies) {
  make_sandbox(logind_delay_max("300"));
  const auto files = write_kubelet_files({{0, 3}, {2000000000, 20}}, 2000001000, 20);
  auto n = start_gns_node(files.flags(), kDrain, kExitTimeout, kDrain, kKubeletGrace,
                          "the shim sends no signal of its own", "auto", {"--crash-after=2s"});
  ASSERT_FALSE(HasFailure());

  const auto t0 = sb().reboot();
  ASSERT_TRUE(wait_event(n.s, "SignalLeftToKubelet"));
  n.s.process->signal(SIGKILL);
  ASSERT_TRUE(n.s.process->wait_for_exit(kEventTimeout));
  auto s2 = restart_shim(n.s, /*wait_ready=*/false);
  ASSERT_TRUE(wait_event(s2, "ShutdownResumed")) << "the restarted shim did not resume the hold";
  ASSERT_TRUE(n.api.process->wait_for_exit(kEventTimeout)) << "nobody signalled the apiserver";
  print_figures("gns_restart_left_to_kubelet", t0, n.api, n.k);
  const auto crash = n.k.first("CRASH");
  ASSERT_TRUE(crash);
  const auto signals = n.api.signals();
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_GE(signals[0].usec, *crash);
  EXPECT_EQ(n.api.lifecycle().back().detail, "0");
  // Both runs write the same event log: the first left the signal to kubelet, the second sent it.
  EXPECT_EQ(s2.count_events("SignalLeftToKubelet"), 1u);
  EXPECT_EQ(s2.count_events("SignalForwarded"), 1u);
}

// kubelet kills kube-apiserver before the drain is over (its group's grace shorter than the
// drain): reported before the shutdown in ?verbose, the metric and a WARNING, and the event log
// shows it afterwards. Scaled down from the 10 s kill of a 70 s drain: 2 s of a 4 s one.
TEST_F(ShimKubelet, ASigkillBeforeTheDrainIsReportedBeforeTheShutdown) {
  const auto files = write_kubelet_files({{0, 2}, {2000000000, 5}}, std::nullopt, 30);
  auto [api, s, k, line] =
      start_gns_node(files.flags(), "4s", "2s", kKubeletFirstGroup, "2s", "cuts the drain");
  ASSERT_FALSE(HasFailure());
  EXPECT_THAT(line, testing::HasSubstr("cuts the drain from 4s to 2s"));
  // The group must cover the hold (6 s) and the pod's own 30 s, kubelet's SIGKILL coming at the
  // shorter of the group's grace and the pod's.
  EXPECT_THAT(line, testing::HasSubstr("{priority: 0, shutdownGracePeriodSeconds: 30}"));
  EXPECT_EQ(shim_metric(s, "shutdown_shim_kubelet_cuts_drain"), 1.0);
  EXPECT_THAT(sandbox::read_text_file(s.log), testing::HasSubstr("cuts the drain"));

  bool reached = false;
  const auto t0 = reboot_until_target(&reached);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout));
  print_figures("gns_attach_cut", t0, api, k);
  EXPECT_TRUE(reached);
  EXPECT_EQ(k.count("SIGKILL"), 1u) << "the stand-in must kill within the drain";
  EXPECT_EQ(api.signals().size(), 1u);
  // kubelet closes its lock when its group's timer fires, 200 ms before the runtime's SIGKILL lands
  // (the stand-in does as the real kubelet since issue 32): the target still runs then, but
  // kubelet's SIGTERM went, and kubelet runs on. The shim before issue 32 took the lock's end for a
  // kubelet gone and sent a second SIGTERM (+2305 ms; exit 1 at once).
  EXPECT_EQ(s.count_events("SignalForwarded"), 0u);
  const auto expected = s.first_event("KubeletShutdown");
  ASSERT_TRUE(expected);
  EXPECT_EQ(sandbox::json_string_field(expected->line, "kubelet_cuts_drain"), "true")
      << expected->line;
  const auto exited = s.first_event("TargetExited");
  ASSERT_TRUE(exited);
  EXPECT_LT(exited->monotonic_us, t0 + 4'000'000u) << "killed before the drain was over";
}

}  // namespace
}  // namespace shim_it
