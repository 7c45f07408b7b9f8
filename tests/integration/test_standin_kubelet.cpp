// Self-tests of fake_kubelet's model of kubelet 1.35's graceful node shutdown and static pods
// (tests/sandbox/README.md, "fake_kubelet"), against the real logind in a node_sandbox: pods run
// and restarted, two priority groups with etcd beside kube-apiserver, the lock released at the
// last group's timer before the runtime's SIGKILL, the stale close after a cancel, and a kubelet
// started while a shutdown runs. The pods are fake_apiservers, each with its own files. Order is
// read from the stand-ins' own logs; the only time bounds asserted are lower bounds the flags set.

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

constexpr const char* kCriticalPriority = "2000001000";  // kubeadm's static pods

// The stand-in's --log.
struct kubelet_log {
  sandbox::child_process* process = nullptr;
  std::filesystem::path path;

  std::vector<sandbox::timed_line> lines(const std::string& word,
                                         const std::string& detail = {}) const {
    std::vector<sandbox::timed_line> out;
    for (auto& l : sandbox::read_timed_lines(path)) {
      if (l.word == word && l.detail.starts_with(detail)) out.push_back(std::move(l));
    }
    return out;
  }
  std::optional<sandbox::timed_line> first(const std::string& word,
                                           const std::string& detail = {}) const {
    auto found = lines(word, detail);
    if (found.empty()) return std::nullopt;
    return found.front();
  }
};

class StandInKubelet : public ShimTest {
 protected:
  // The pods file's line for a fake_apiserver pod: NAME PRIORITY GRACE_S COMMAND...
  static std::string pod_line(const apiserver& a, const std::string& priority, int grace_s) {
    return fmt::format("{} {} {} {}", a.name, priority, grace_s, fmt::join(a.argv, " "));
  }

  kubelet_log start_kubelet(const std::vector<std::string>& pods,
                            const std::vector<std::string>& flags) {
    const auto pods_file = sb().path("pods.txt");
    std::ofstream out(pods_file, std::ios::trunc);
    out << "# NAME PRIORITY TERMINATION_GRACE_S COMMAND...\n";
    for (const auto& line : pods) out << line << "\n";
    out.close();
    return start_kubelet_with({"--pods=" + pods_file.string()}, flags);
  }

  kubelet_log start_kubelet_with(const std::vector<std::string>& mode,
                                 const std::vector<std::string>& flags) {
    kubelet_log k;
    k.path = sb().path("kubelet.log");
    std::vector<std::string> argv = {sb().tools().fake_kubelet, "--address=" + sb().bus_address(),
                                     "--log=" + k.path.string()};
    argv.insert(argv.end(), mode.begin(), mode.end());
    argv.insert(argv.end(), flags.begin(), flags.end());
    k.process = &sb().spawn("fake-kubelet", argv);
    return k;
  }

  // The count-th line with word (and detail starting so), waited for while the stand-in runs.
  std::optional<sandbox::timed_line> wait_line(const kubelet_log& k, const std::string& word,
                                               const std::string& detail = {},
                                               std::size_t count = 1) {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto found = k.lines(word, detail);
      if (found.size() >= count) return found[count - 1];
      if (!k.process->running()) break;
      std::this_thread::sleep_for(10ms);
    }
    note(fmt::format("no {} x{} '{}' in the stand-in kubelet's log", word, count, detail));
    return std::nullopt;
  }

  // Its lock is listed and it listens for PrepareForShutdown.
  bool wait_gns(const kubelet_log& k) {
    return sb().wait_for_inhibitor_of("kubelet", k.process->pid(), kStartTimeout) &&
           wait_line(k, "WATCHING").has_value();
  }

  // The PID in a "NAME PID ..." detail.
  static pid_t pid_in(const sandbox::timed_line& l) {
    return static_cast<pid_t>(std::stol(l.detail.substr(l.detail.find(' ') + 1)));
  }
};

// --pods: each pod's command runs as the stand-in's child; one that exits is started again
// --restart-delay later (restartPolicy Always), and its own pidfile names the new process.
TEST_F(StandInKubelet, RunsItsPodsAndRestartsOneThatExits) {
  auto api = describe_apiserver("kube-apiserver", api_delay("0s"));
  auto k = start_kubelet({pod_line(api, kCriticalPriority, 30)},
                         {"--group=0:5", "--group=2000000000:5", "--restart-delay=1s"});
  ASSERT_TRUE(wait_gns(k)) << "graceful node shutdown did not start";
  const auto started = wait_line(k, "POD_STARTED", "kube-apiserver ");
  ASSERT_TRUE(started);
  ASSERT_TRUE(wait_apiserver_listening(api));
  const pid_t first = pid_in(*started);
  EXPECT_EQ(api.pid(), first);
  sandbox::http_client client(api.port());
  EXPECT_EQ(client.get("/readyz").status, 200u);

  ASSERT_EQ(kill(first, SIGKILL), 0);
  const auto exited = wait_line(k, "POD_EXITED", fmt::format("kube-apiserver {} signal 9", first));
  ASSERT_TRUE(exited);
  const auto restarted = wait_line(k, "POD_STARTED", "kube-apiserver ", 2);
  ASSERT_TRUE(restarted) << "not restarted";
  const pid_t second = pid_in(*restarted);
  EXPECT_NE(second, first);
  EXPECT_GE(restarted->usec, exited->usec + 1'000'000u) << "restarted before --restart-delay";
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (api.pid() != second && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(api.pid(), second) << "the pidfile names the new process";
  ASSERT_TRUE(wait_apiserver_listening(api));
  sandbox::http_client again(api.port());
  EXPECT_EQ(again.get("/readyz").status, 200u);
  EXPECT_TRUE(k.lines("SIGTERM").empty());
  EXPECT_TRUE(sb().find_inhibitor("kubelet"));
}

// kubeadm's node: etcd and kube-apiserver both at priority 2000001000, so in the critical group
// together, after a lower group whose pod ignores its SIGTERM. The lower group's timer ends its
// turn (its pod's SIGKILL comes later, within the next turn); etcd and kube-apiserver get their
// SIGTERMs together, and kube-apiserver, draining for 10 s, answers etcd-backed requests with
// errors once etcd is gone. The last group's timer closes the lock: the reboot goes on, and
// kube-apiserver's SIGKILL comes after that. Groups as shutdownGracePeriod 7 s with 5 s for
// critical pods (migrateConfig).
TEST_F(StandInKubelet, TwoGroupsStopEtcdWithTheApiserverAndReleaseAtTheLastTimer) {
  apiserver_options stubborn;
  stubborn.ignore_sigterm = true;
  auto web = describe_apiserver("web", stubborn);
  auto etcd = describe_apiserver("etcd", api_delay("0s"));
  apiserver_options draining = api_delay("10s");
  draining.extra = {"--etcd-pidfile=" + etcd.pidfile.string()};
  auto api = describe_apiserver("kube-apiserver", draining);
  auto k =
      start_kubelet({pod_line(web, "0", 30), pod_line(etcd, kCriticalPriority, 30),
                     pod_line(api, kCriticalPriority, 30)},
                    {"--shutdown-grace-period=7s", "--shutdown-grace-period-critical-pods=5s"});
  ASSERT_TRUE(wait_gns(k));
  for (const auto* a : {&web, &etcd, &api}) {
    ASSERT_TRUE(wait_apiserver_listening(*a)) << a->name;
  }
  sandbox::http_client client(api.port());
  EXPECT_EQ(client.get("/api/v1/namespaces/default").status, 200u);

  const auto t0 = sb().reboot();
  const auto etcd_exit = wait_line(k, "POD_EXITED", "etcd ");
  ASSERT_TRUE(etcd_exit);
  EXPECT_THAT(etcd_exit->detail, testing::EndsWith(" exit 0"));
  // kube-apiserver drains on (its SIGKILL is 5.2 s after its SIGTERM) without its storage.
  const auto without_etcd = client.get("/api/v1/namespaces/default");
  EXPECT_EQ(without_etcd.status, 500u) << without_etcd.body;
  EXPECT_THAT(without_etcd.body, testing::HasSubstr(R"("reason":"ServerTimeout")"));
  const auto readyz = client.get("/readyz");
  EXPECT_THAT(readyz.body, testing::HasSubstr("[-]etcd failed"));
  EXPECT_THAT(readyz.body, testing::HasSubstr("[-]shutdown failed"));

  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start) << "the stand-in kept its lock";
  const auto api_exit = wait_line(k, "POD_EXITED", "kube-apiserver ");
  ASSERT_TRUE(api_exit);
  EXPECT_THAT(api_exit->detail, testing::EndsWith(" signal 9"));
  ASSERT_TRUE(wait_line(k, "POD_EXITED", "web "));

  const auto group_low = k.first("GROUP", "priority=0 grace=2s pods=web");
  const auto group_critical =
      k.first("GROUP", "priority=2000000000 grace=5s pods=etcd,kube-apiserver");
  const auto end_low = k.first("GROUP_END", "priority=0 timer");
  const auto end_critical = k.first("GROUP_END", "priority=2000000000 timer");
  const auto term_web = k.first("SIGTERM", "web ");
  const auto term_etcd = k.first("SIGTERM", "etcd ");
  const auto term_api = k.first("SIGTERM", "kube-apiserver ");
  const auto kill_web = k.first("SIGKILL", "web ");
  const auto kill_api = k.first("SIGKILL", "kube-apiserver ");
  const auto released = k.first("LOCK_RELEASED");
  for (const auto& [name, line] :
       std::vector<std::pair<std::string, std::optional<sandbox::timed_line>>>{
           {"GROUP 0", group_low},
           {"GROUP 2000000000", group_critical},
           {"GROUP_END 0", end_low},
           {"GROUP_END 2000000000", end_critical},
           {"SIGTERM web", term_web},
           {"SIGTERM etcd", term_etcd},
           {"SIGTERM kube-apiserver", term_api},
           {"SIGKILL web", kill_web},
           {"SIGKILL kube-apiserver", kill_api},
           {"LOCK_RELEASED", released}}) {
    ASSERT_TRUE(line) << "no " << name << " in the stand-in's log";
  }
  EXPECT_GE(term_web->usec, t0);
  // The lower group's turn ends at its timer; the critical group's two SIGTERMs come together
  // after it, and before the stubborn pod's SIGKILL (2 s + the runtime's 200 ms lag).
  EXPECT_GE(end_low->usec, term_web->usec + 2'000'000u);
  EXPECT_GE(term_etcd->usec, end_low->usec);
  EXPECT_GE(term_api->usec, end_low->usec);
  EXPECT_GT(kill_web->usec, group_critical->usec);
  EXPECT_GE(kill_web->usec, term_web->usec + 2'200'000u);
  // The last turn ends at its timer and the lock goes; kube-apiserver's SIGKILL only after that.
  EXPECT_GE(end_critical->usec, term_api->usec + 5'000'000u);
  EXPECT_GE(released->usec, end_critical->usec);
  EXPECT_GT(kill_api->usec, released->usec);
  EXPECT_GE(kill_api->usec, term_api->usec + 5'200'000u);
  EXPECT_GE(start->usec, released->usec);
  EXPECT_EQ(api.signals().size(), 1u) << "one SIGTERM reaches kube-apiserver";
  // Killed pods are terminal: none started again.
  std::this_thread::sleep_for(1500ms);  // a bounded look for the absence of a restart (1 s delay)
  EXPECT_EQ(k.lines("POD_STARTED").size(), 3u);
}

// One target, a process that ignores its SIGTERM: the group's timer (--grace) ends the turn and
// the lock goes; the runtime's SIGKILL (--sigkill-lag later) lands after that, as kubelet's does.
TEST_F(StandInKubelet, OneTargetReleasesAtTheGroupsTimerBeforeTheSigkill) {
  apiserver_options stubborn;
  stubborn.ignore_sigterm = true;
  auto api = start_apiserver("kube-apiserver", stubborn);
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet_with({"--target-pidfile=" + api.pidfile.string()},
                              {"--sigterm-delay=0s", "--grace=1s", "--sigkill-lag=500ms"});
  ASSERT_TRUE(wait_gns(k));
  const auto t0 = sb().reboot();
  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start);
  ASSERT_TRUE(api.process->wait_for_exit(kEventTimeout));
  ASSERT_TRUE(wait_line(k, "TARGET_EXITED"));
  const auto term = k.first("SIGTERM");
  const auto end = k.first("GROUP_END", "priority=0 timer");
  const auto released = k.first("LOCK_RELEASED");
  const auto killed = k.first("SIGKILL");
  ASSERT_TRUE(term && end && released && killed) << sandbox::read_text_file(k.path);
  EXPECT_EQ(term->detail, std::to_string(api.process->pid()));
  EXPECT_GE(end->usec, term->usec + 1'000'000u);
  EXPECT_GE(released->usec, end->usec);
  EXPECT_GT(killed->usec, released->usec) << "the lock outlived the target";
  EXPECT_GE(killed->usec, term->usec + 1'500'000u);
  EXPECT_GE(start->usec, released->usec);
}

// --release-after-exit: the stand-in's behaviour before (kept for tests that depend on it): the
// lock is released only once the target has exited, after its SIGKILL.
TEST_F(StandInKubelet, ReleaseAfterExitKeepsTheLockUntilTheTargetIsGone) {
  apiserver_options stubborn;
  stubborn.ignore_sigterm = true;
  auto api = start_apiserver("kube-apiserver", stubborn);
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet_with(
      {"--target-pidfile=" + api.pidfile.string()},
      {"--sigterm-delay=0s", "--grace=1s", "--sigkill-lag=500ms", "--release-after-exit"});
  ASSERT_TRUE(wait_gns(k));
  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  const auto killed = k.first("SIGKILL");
  const auto exited = k.first("TARGET_EXITED");
  const auto released = k.first("LOCK_RELEASED");
  ASSERT_TRUE(killed && exited && released) << sandbox::read_text_file(k.path);
  EXPECT_GT(released->usec, exited->usec);
  EXPECT_GT(exited->usec, killed->usec);
  EXPECT_TRUE(k.first("GROUP_END", "priority=0 pods-gone"));
  EXPECT_FALSE(k.first("GROUP_END", "priority=0 timer"));
}

// acquireInhibitLock after a cancel: the new lock gets the number processShutdownEvent closed, and
// the close of the old number closes it. The next shutdown is acted on without a lock: the new
// kube-apiserver (started as kubelet would, under the same pidfile) still gets its SIGTERM.
TEST_F(StandInKubelet, StaleCloseAfterACancelLosesTheLockButTheNextShutdownStillSignals) {
  auto first = start_apiserver("kube-apiserver", api_delay("0s"));
  ASSERT_FALSE(HasFailure());
  auto k = start_kubelet_with({"--target-pidfile=" + first.pidfile.string()},
                              {"--sigterm-delay=0s", "--grace=5s"});
  ASSERT_TRUE(wait_gns(k));
  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  ASSERT_TRUE(first.process->wait_for_exit(kEventTimeout));
  const auto released = k.first("LOCK_RELEASED");
  ASSERT_TRUE(released);

  const auto before = sb().prepare_for_shutdown_signals().size();
  sb().cancel_last_job();
  ASSERT_TRUE(sb().wait_for_prepare_for_shutdown(false, kEventTimeout, before));
  const auto stale = wait_line(k, "STALE_CLOSE");
  ASSERT_TRUE(stale);
  const auto taken = k.lines("LOCK_TAKEN");
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[1].detail, taken[0].detail) << "the new lock got another number";
  EXPECT_EQ(released->detail, taken[0].detail);
  EXPECT_EQ(stale->detail, taken[1].detail + " the new lock");
  EXPECT_TRUE(sb().wait_for_inhibitor("kubelet", false, kEventTimeout))
      << "logind still lists the stand-in's lock";
  EXPECT_TRUE(k.process->running());

  auto second = start_apiserver("kube-apiserver", api_delay("0s"));
  ASSERT_FALSE(HasFailure());
  const auto t1 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t1));
  ASSERT_TRUE(second.process->wait_for_exit(kEventTimeout)) << "no SIGTERM at the next shutdown";
  ASSERT_EQ(second.signals().size(), 1u);
  EXPECT_EQ(second.lifecycle().back().detail, "0");
  const auto term = wait_line(k, "SIGTERM", std::to_string(second.process->pid()));
  ASSERT_TRUE(term);
  const auto closed_again = wait_line(k, "STALE_CLOSE", taken[0].detail + " EBADF");
  EXPECT_TRUE(closed_again) << "the release at the end closed something";
  EXPECT_EQ(k.lines("LOCK_RELEASED").size(), 1u);
}

// A kubelet started while a shutdown runs: logind refuses its lock (OperationInProgress), its
// shutdown manager does not start, and it runs its pods for the rest of its life without GNS:
// no lock, no kills, PrepareForShutdown not even listened to; a pod that exits comes back.
TEST_F(StandInKubelet, StartedDuringAShutdownRunsWithoutGns) {
  auto hold = sb().take_inhibitor("standin-test", "keeps the shutdown running");
  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_prepare_for_shutdown(true, kEventTimeout));
  auto api = describe_apiserver("kube-apiserver", api_delay("0s"));
  auto k = start_kubelet({pod_line(api, kCriticalPriority, 30)},
                         {"--group=0:5", "--group=2000000000:5", "--restart-delay=500ms"});
  const auto no_gns = wait_line(k, "NO_GNS");
  ASSERT_TRUE(no_gns);
  EXPECT_THAT(no_gns->detail, testing::HasSubstr("org.freedesktop.login1.OperationInProgress"));
  const auto started = wait_line(k, "POD_STARTED", "kube-apiserver ");
  ASSERT_TRUE(started);
  ASSERT_TRUE(wait_apiserver_listening(api));
  EXPECT_FALSE(sb().find_inhibitor("kubelet"));
  EXPECT_TRUE(k.lines("LOCK_TAKEN").empty());
  EXPECT_TRUE(k.lines("WATCHING").empty());

  ASSERT_EQ(kill(pid_in(*started), SIGKILL), 0);
  ASSERT_TRUE(wait_line(k, "POD_STARTED", "kube-apiserver ", 2)) << "not restarted";
  hold.release();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  std::this_thread::sleep_for(1s);  // a bounded look for the absence of a kill
  EXPECT_TRUE(k.lines("SIGTERM").empty());
  EXPECT_TRUE(k.lines("PREPARE_FOR_SHUTDOWN").empty());
  EXPECT_TRUE(api.signals().empty());
  EXPECT_TRUE(k.process->running());
}

}  // namespace
}  // namespace shim_it
