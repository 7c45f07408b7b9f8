// Issue 8, item 4: ordinary signals (logrotate's SIGHUP, a stray SIGUSR1, a terminal's SIGTSTP)
// must neither kill nor stop an attach-mode shim, idle or during a hold, and SIGHUP reopens the
// event log.

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <thread>

#include "shim_harness.hpp"

namespace shim_it {
namespace {

struct stray_signal {
  int number;
  std::string name;
};

// Every signal an admin, a tool or a terminal might send that is no shutdown cue. Real-time ones
// from both ends of the range and its middle; glibc keeps the two below SIGRTMIN for itself.
std::vector<stray_signal> stray_signals() {
  std::vector<stray_signal> out = {
      {SIGHUP, "SIGHUP"},   {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGQUIT, "SIGQUIT"},
      {SIGALRM, "SIGALRM"}, {SIGXCPU, "SIGXCPU"}, {SIGPWR, "SIGPWR"},   {SIGSYS, "SIGSYS"},
  };
  for (int offset : {0, 1, 2, 8}) {
    out.push_back({SIGRTMIN + offset, offset ? fmt::format("SIGRTMIN+{}", offset) : "SIGRTMIN"});
  }
  for (int offset : {1, 0}) {
    out.push_back({SIGRTMAX - offset, offset ? fmt::format("SIGRTMAX-{}", offset) : "SIGRTMAX"});
  }
  for (auto s : {stray_signal{SIGTSTP, "SIGTSTP"}, stray_signal{SIGTTIN, "SIGTTIN"},
                 stray_signal{SIGTTOU, "SIGTTOU"}}) {
    out.push_back(s);
  }
  return out;
}

// The state letter of /proc/PID/stat: 'T' for stopped.
char process_state(pid_t pid) {
  const std::string stat = sandbox::read_text_file(fmt::format("/proc/{}/stat", pid));
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

class FaultSignals : public ShimTest {
 protected:
  // SIGQUIT, SIGXCPU and SIGSYS dump core by default: a shim they kill must not leave core files
  // behind. Children inherit the limit.
  void SetUp() override {
    const rlimit none{0, 0};
    setrlimit(RLIMIT_CORE, &none);
  }
};

TEST_F(FaultSignals, IdleShimSurvivesEveryStraySignal) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  const auto options = attach_to(api, "3s", "5s");
  std::optional<shim> s;
  std::vector<std::string> casualties;
  const auto signals = stray_signals();
  for (const auto& sig : signals) {
    if (!s) {
      s = start_shim(options, /*wait_ready=*/false);
      ASSERT_TRUE(wait_shim_ready(*s)) << "the shim did not become ready";
      ASSERT_TRUE(wait_shim_lock_of(*s)) << "the shim never took its lock";
    }
    s->process->signal(sig.number);
    // The answer proves the signal was acted on first: a pending signal is delivered before the
    // process returns to user space, which it must do to read the request.
    sandbox::http_client client(s->port);
    const auto r = client.get("/readyz");
    if (!r.ok) s->process->wait_for_exit(2s);  // dying, or stopped
    const bool running = s->process->running();
    const char state = running ? process_state(s->process->pid()) : 'X';
    EXPECT_TRUE(running) << sig.name << " killed the idle shim: "
                         << sandbox::describe_wait_status(s->process->wait_status().value_or(0));
    EXPECT_NE(state, 'T') << sig.name << " stopped the idle shim";
    EXPECT_TRUE(r.ok && r.status == 200)
        << sig.name << ": /readyz " << (r.ok ? std::to_string(r.status) : r.error);
    if (running) {
      EXPECT_TRUE(shim_lock_listed(*s)) << sig.name << ": the lock is no longer listed";
    }
    if (!running || state == 'T' || !r.ok) {
      casualties.push_back(sig.name);
      s->process->kill_and_reap();
      s.reset();
    }
  }
  std::string lost;
  for (const auto& c : casualties) lost += " " + c;
  std::cout << fmt::format("FIGURES stray_signals_idle sent={} survived={} lost_to:{}",
                           signals.size(), signals.size() - casualties.size(),
                           lost.empty() ? " none" : lost)
            << std::endl;
}

TEST_F(FaultSignals, StraySignalsDuringAHoldChangeNothing) {
  auto api = start_apiserver("kube-apiserver", api_delay("1s"));
  auto s = start_shim(attach_to(api, "3s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));

  const auto t0 = sb().reboot();
  ASSERT_TRUE(wait_signal_count(api, 1)) << "the apiserver never got its SIGTERM";
  for (const auto& sig : stray_signals()) s.process->signal(sig.number);
  const auto sent_us = sandbox::monotonic_us();
  sandbox::http_client client(s.port);
  const auto r = client.get("/readyz");
  if (!r.ok) s.process->wait_for_exit(2s);  // dying: let it finish, for a clear message
  const bool running = s.process->running();
  EXPECT_TRUE(running) << "the signals killed the shim mid-hold: "
                       << sandbox::describe_wait_status(s.process->wait_status().value_or(0));
  if (running) {
    EXPECT_NE(process_state(s.process->pid()), 'T') << "the signals stopped the shim";
  }
  EXPECT_TRUE(r.ok && r.status == 503)
      << "/readyz mid-hold: " << (r.ok ? std::to_string(r.status) : r.error);

  const auto start = sb().wait_for_start_unit("reboot.target", kEventTimeout, t0);
  ASSERT_TRUE(start) << "logind never started reboot.target";
  const auto api_status = api.process->wait_for_exit(kEventTimeout);
  std::cout << fmt::format(
                   "FIGURES stray_signals_hold signals_sent_ms={:.1f} hold_s={:.3f} "
                   "sigterm={}",
                   ms_between(t0, sent_us), ms_between(t0, start->usec) / 1000,
                   api.signals().size())
            << std::endl;
  EXPECT_GE(start->usec - t0, 3'000'000u) << "the signals cut the hold short of the drain";
  EXPECT_EQ(api.signals().size(), 1u) << "the apiserver must get exactly one SIGTERM";
  ASSERT_TRUE(api_status) << "the apiserver did not exit";
  EXPECT_EQ(sandbox::shell_exit_code(*api_status), 0) << "exit 1 means a second signal";
}

TEST_F(FaultSignals, SighupReopensTheEventLog) {
  auto api = start_apiserver("kube-apiserver", api_delay("500ms"));
  auto s = start_shim(attach_to(api, "1s", "5s"));
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(wait_shim_lock_of(s));

  // logrotate's way: rename, then SIGHUP.
  const auto rotated = std::filesystem::path(s.event_log.string() + ".1");
  std::filesystem::rename(s.event_log, rotated);
  s.process->signal(SIGHUP);
  sandbox::http_client client(s.port);
  const auto r = client.get("/readyz");
  if (!r.ok) s.process->wait_for_exit(2s);  // dying: let it finish, for a clear message
  ASSERT_TRUE(s.process->running())
      << "SIGHUP killed the shim: "
      << sandbox::describe_wait_status(s.process->wait_status().value_or(0));
  EXPECT_TRUE(r.ok && r.status == 200) << "/readyz after SIGHUP: " << r.status << " " << r.error;
  EXPECT_TRUE(shim_lock_listed(s)) << "SIGHUP dropped the lock";

  // Something for the shim to record: a reboot.
  const auto t0 = sb().reboot();
  ASSERT_TRUE(sb().wait_for_start_unit("reboot.target", kEventTimeout, t0));
  EXPECT_TRUE(wait_event(s, "ShutdownInitiated", 10s))
      << "no ShutdownInitiated in a new file at the original path";
  const auto fresh = sandbox::read_event_log(s.event_log);
  const auto old = sandbox::read_event_log(rotated);
  auto has = [](const std::vector<sandbox::shim_event>& events, const std::string& name) {
    for (const auto& e : events) {
      if (e.event == name) return true;
    }
    return false;
  };
  std::cout << fmt::format("FIGURES sighup_reopen old_file_events={} new_file_events={}",
                           old.size(), fresh.size())
            << std::endl;
  EXPECT_TRUE(has(old, "Started") && has(old, "InhibitorTaken"))
      << "the events before the rotation are not in the renamed file";
  EXPECT_FALSE(has(old, "ShutdownInitiated")) << "the shim kept writing to the renamed file";
  EXPECT_FALSE(has(fresh, "Started")) << "the new file repeats events from before the rotation";
}

}  // namespace
}  // namespace shim_it
