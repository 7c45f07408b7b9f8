// The pod manifests of unit-files/kubernetes/ run for real under `podman kube play` (Debian's
// podman 4.3 with runc), as tests/containers/test-manifest rewrites them: local images, the
// stand-in kube-apiserver, and the private bus of a sandboxed node whose real systemd-logind the
// shims in the pods hold their locks with. tests/containers/run-pods builds the images and names
// them in the environment (SHIM_TEST_IMAGES=shim,apiserver,wrapper).
//
// The same fixture runs the podman command line of unit-files/openshift's MachineConfig
// (MachineConfigUnit...): the unit's ExecStart word for word as machineconfig-podman-argv takes it
// from the MachineConfig, with the sandbox's bus socket, a node root of the test's, a local image
// (MACHINECONFIG_IMAGE) and seconds-long timings put in.
//
// What podman does not do as kubelet does (and so what this cannot show) is in docs and the
// README: it drops readinessProbe, turns livenessProbe into a systemd timer (test-manifest takes
// the probes out, so that nothing reaches the machine's PID 1), ignores
// terminationGracePeriodSeconds (podman stop waits 10 s) and `podman pod stop` kills every
// container at once.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "notify_socket.hpp"
#include "process.hpp"
#include "shim_harness.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Seconds rather than the manifests' minutes; the stand-in's shutdown delay lies within the
// drain, as kube-apiserver's --shutdown-delay-duration does.
constexpr const char* kDrainDelay = "3s";
constexpr std::uint64_t kDrainUs = 3'000'000;
constexpr const char* kExitTimeout = "10s";
constexpr const char* kApiserverShutdownDelay = "2s";
constexpr std::uint64_t kCapKill = 1ULL << 5;
constexpr std::uint64_t kCapSysBoot = 1ULL << 22;

std::string required_env(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) throw std::runtime_error(fmt::format("{} is not set", name));
  return value;
}

// The sandbox starts programs by path (execve): run-pods names podman's.
std::string podman() { return required_env("PODMAN"); }

// A status line of /proc/PID/status ("CapEff", "NoNewPrivs", ...), without the name.
std::string proc_status(pid_t pid, const std::string& field) {
  std::istringstream lines(sandbox::read_text_file(fmt::format("/proc/{}/status", pid)));
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(field + ":")) {
      const auto value = line.substr(field.size() + 1);
      return value.substr(value.find_first_not_of(" \t"));
    }
  }
  return "";
}

std::uint64_t proc_caps(pid_t pid, const std::string& field) {
  return std::stoull(proc_status(pid, field), nullptr, 16);
}

class PodmanKubePlay : public shim_it::ShimTest {
 protected:
  struct result {
    int status = -1;
    std::string output;
  };

  // Runs a command of the test (podman, test-manifest) to its end, bounded; output captured.
  result run(const std::vector<std::string>& argv, std::chrono::seconds timeout = 180s,
             const std::vector<std::string>& env = {}) {
    const std::string name =
        fmt::format("cmd-{}-{}", ++commands_, fs::path(argv[0]).filename().string());
    auto& process = sb().spawn(name, argv, env);
    const auto status = process.wait_for_exit(timeout);
    result r{status ? sandbox::shell_exit_code(*status) : -1,
             sandbox::read_text_file(sb().log_path(name))};
    if (!status) process.kill_and_reap();
    note(fmt::format("$ {} -> {}", fmt::join(argv, " "), r.status));
    return r;
  }

  std::string podman_inspect(const std::string& container, const std::string& format) {
    const auto r = run({podman(), "inspect", "--format", format, container});
    return r.status == 0 ? r.output.substr(0, r.output.find('\n')) : "";
  }

  // One pod: the manifest rewritten by test-manifest and played; removed in TearDown.
  struct pod {
    std::string name;
    std::uint16_t shim_port = 0;
    fs::path node_root;
    fs::path event_log;
    std::string container(const std::string& c) const { return name + "-" + c; }
  };

  // apiserver_delay: the stand-in's --shutdown-delay-duration, how long it serves after SIGTERM.
  pod play(const std::string& manifest_name,
           const std::string& apiserver_delay = kApiserverShutdownDelay) {
    sandbox::node_sandbox& node = sb();
    pod p;
    p.name = fmt::format("shim-test-{}-{}", ::getpid(), ++pods_);
    p.shim_port = sandbox::pick_free_port();
    p.node_root = node.path(p.name + "-root");
    p.event_log = p.node_root / "var/log/shutdown-shim/events.jsonl";
    const fs::path manifest = node.path(p.name + ".yaml");
    const auto rewritten = run({required_env("TEST_MANIFEST"),
                                fs::path(required_env("MANIFEST_DIR")) / manifest_name,
                                manifest.string(),
                                "--images",
                                required_env("SHIM_TEST_IMAGES"),
                                "--bus-socket",
                                node.path("system_bus_socket").string(),
                                "--etc-systemd",
                                node.path("etc-systemd").string(),
                                "--node-root",
                                p.node_root.string(),
                                "--pod-name",
                                p.name,
                                "--shim-port",
                                std::to_string(p.shim_port),
                                "--apiserver-port",
                                std::to_string(sandbox::pick_free_port()),
                                "--drain-delay",
                                kDrainDelay,
                                "--exit-timeout",
                                kExitTimeout,
                                "--apiserver-shutdown-delay",
                                apiserver_delay});
    EXPECT_EQ(rewritten.status, 0) << rewritten.output;
    played_.push_back(p.name);
    // A memory emptyDir as kubelet mounts one: a tmpfs, its root mode 1777 (test-manifest made
    // the directories).
    const fs::path empty_dirs = p.node_root / "emptydir";
    if (fs::is_directory(empty_dirs)) {
      for (const auto& d : fs::directory_iterator(empty_dirs)) {
        const bool mounted =
            ::mount("shim-test-emptydir", d.path().c_str(), "tmpfs", 0, "mode=1777,size=1m") == 0;
        EXPECT_TRUE(mounted) << d.path() << ": " << std::strerror(errno);
        if (mounted) tmpfs_.push_back(d.path());
      }
    }
    const auto played = run({podman(), "kube", "play", manifest.string()});
    EXPECT_EQ(played.status, 0) << played.output;
    return p;
  }

  void TearDown() override {
    for (const auto& name : played_) run({podman(), "pod", "rm", "--force", "--time", "0", name});
    for (const auto& name : containers_) run({podman(), "rm", "--force", "--time", "0", name});
    for (const auto& dir : tmpfs_) ::umount2(dir.c_str(), MNT_DETACH);
    ShimTest::TearDown();
  }

  // The MachineConfig's unit, run as its ExecStart says (env: what systemd would give podman):
  // the container is p.container("shim"); removed in TearDown. Returns podman's exit status.
  int run_machineconfig_unit(pod& p, const std::vector<std::string>& env) {
    sandbox::node_sandbox& node = sb();
    p.name = fmt::format("shim-test-{}-{}", ::getpid(), ++pods_);
    p.shim_port = sandbox::pick_free_port();
    p.node_root = node.path(p.name + "-root");
    p.event_log = p.node_root / "var/log/shutdown-shim/events.jsonl";
    const fs::path argv_file = node.path(p.name + ".argv");
    const auto made =
        run({required_env("MACHINECONFIG_ARGV"), required_env("MACHINECONFIG"), argv_file.string(),
             "--image", required_env("MACHINECONFIG_IMAGE"), "--bus-socket",
             node.path("system_bus_socket").string(), "--etc-systemd",
             node.path("etc-systemd").string(), "--node-root", p.node_root.string(), "--name",
             p.container("shim"), "--listen", fmt::format("127.0.0.1:{}", p.shim_port),
             "--drain-delay", kDrainDelay, "--exit-timeout", kExitTimeout});
    EXPECT_EQ(made.status, 0) << made.output;
    // What kubelet's files would say on an OpenShift master without graceful node shutdown.
    const fs::path kube = p.node_root / "etc/kubernetes";
    sandbox::write_file_atomically(kube / "kubelet.conf",
                                   "apiVersion: kubelet.config.k8s.io/v1beta1\n"
                                   "kind: KubeletConfiguration\n");
    sandbox::write_file_atomically(
        kube / "manifests/kube-apiserver-pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n"
        "  namespace: openshift-kube-apiserver\nspec:\n"
        "  priority: 2000001000\n  priorityClassName: system-node-critical\n"
        "  terminationGracePeriodSeconds: 135\n  containers: []\n");
    containers_.push_back(p.container("shim"));
    return run(sandbox::read_lines(argv_file), 180s, env).status;
  }

  pid_t host_pid(const pod& p, const std::string& container) {
    const auto pid = podman_inspect(p.container(container), "{{.State.Pid}}");
    return pid.empty() ? 0 : std::stoi(pid);
  }

  // The stand-in's signal lines ("SIGTERM <monotonic_us>") from its stdout, i.e. `podman logs`.
  std::vector<std::uint64_t> stand_in_signals(const pod& p, const std::string& container) {
    std::vector<std::uint64_t> out;
    std::istringstream lines(run({podman(), "logs", p.container(container)}).output);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string word;
      std::uint64_t usec = 0;
      if (words >> word >> usec && (word == "SIGTERM" || word == "SIGINT")) out.push_back(usec);
    }
    return out;
  }

  // The shim in the pod answers 200 on /readyz and logind lists its delay lock.
  bool wait_ready(const pod& p) {
    sandbox::http_client client(p.shim_port);
    const auto deadline = std::chrono::steady_clock::now() + shim_it::kStartTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (client.get("/readyz", 500ms).status == 200 && sb().find_inhibitor("shutdown-shim")) {
        return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  std::size_t count(const pod& p, const std::string& event) {
    std::size_t n = 0;
    for (const auto& e : sandbox::read_event_log(p.event_log)) n += e.event == event;
    return n;
  }

  std::optional<sandbox::shim_event> first(const pod& p, const std::string& event) {
    for (const auto& e : sandbox::read_event_log(p.event_log)) {
      if (e.event == event) return e;
    }
    return std::nullopt;
  }

  // Manager.Reboot through the sandbox's logind; what the hold looked like from outside.
  struct held_reboot {
    std::uint64_t reboot_us = 0;
    std::optional<std::uint64_t> unready_us;
    std::optional<sandbox::start_unit_record> start;
  };
  held_reboot reboot(const pod& p) {
    sandbox::http_prober prober(p.shim_port);
    held_reboot r;
    r.reboot_us = sb().reboot();
    r.start = sb().wait_for_start_unit("reboot.target", shim_it::kEventTimeout, r.reboot_us);
    prober.stop();
    r.unready_us = prober.first_failure_at(r.reboot_us);
    return r;
  }

  void figures(const std::string& what, const held_reboot& r,
               const std::vector<std::uint64_t>& signals) {
    const auto since = [&](std::optional<std::uint64_t> t) {
      return t ? fmt::format("{:.0f} ms", shim_it::ms_between(r.reboot_us, *t)) : "-";
    };
    std::vector<std::string> at;
    for (auto s : signals) at.push_back(since(s));
    std::printf("FIGURES %s: /readyz unready %s, %zu SIGTERM at %s, reboot.target %s\n",
                what.c_str(), since(r.unready_us).c_str(), signals.size(),
                fmt::format("{}", fmt::join(at, ", ")).c_str(),
                since(r.start ? std::optional(r.start->usec) : std::nullopt).c_str());
  }

  // The delay lock logind lists is the shim's process in the pod: taken over the mounted socket.
  void expect_lock_of(pid_t shim) {
    const auto lock = sb().find_inhibitor("shutdown-shim");
    ASSERT_TRUE(lock) << "logind lists no lock of the shim";
    EXPECT_EQ(lock->pid, static_cast<std::uint32_t>(shim));
  }

  // A Reboot through the sandbox's logind: /readyz unready first, the reboot held for the drain,
  // one SIGTERM at the stand-in, one SignalForwarded.
  void expect_held_reboot_with_one_sigterm(const pod& p, const std::string& what) {
    const auto r = reboot(p);
    expect_held_with_one_sigterm(p, what, r, stand_in_signals(p, "kube-apiserver"));
  }
  void expect_held_with_one_sigterm(const pod& p, const std::string& what, const held_reboot& r,
                                    const std::vector<std::uint64_t>& signals) {
    figures(what, r, signals);
    ASSERT_TRUE(r.start) << "logind never started reboot.target";
    EXPECT_GE(r.start->usec - r.reboot_us, kDrainUs) << "the reboot went on before the drain";
    ASSERT_TRUE(r.unready_us) << "/readyz never turned unready";
    EXPECT_LT(*r.unready_us, r.start->usec);
    EXPECT_EQ(signals.size(), 1u);
    EXPECT_EQ(count(p, "SignalForwarded"), 1u);
  }

  void SetUp() override { make_sandbox(); }

 private:
  unsigned commands_ = 0;
  unsigned pods_ = 0;
  std::vector<std::string> played_;
  std::vector<std::string> containers_;
  std::vector<fs::path> tmpfs_;
};

TEST_F(PodmanKubePlay, SidecarFindsKubeApiserverByNameAndHoldsARebootWithOneSigterm) {
  const auto p = play("kube-apiserver-sidecar.yaml");
  ASSERT_TRUE(wait_ready(p)) << "the sidecar never became ready with its lock";
  const pid_t shim = host_pid(p, "shutdown-shim");
  const pid_t apiserver = host_pid(p, "kube-apiserver");
  ASSERT_GT(shim, 0);
  ASSERT_GT(apiserver, 0);

  // shareProcessNamespace: one PID namespace for both containers.
  EXPECT_EQ(fs::read_symlink(fmt::format("/proc/{}/ns/pid", shim)),
            fs::read_symlink(fmt::format("/proc/{}/ns/pid", apiserver)));
  // Exactly KILL and SYS_BOOT, no new privileges, a seccomp filter, a read-only root.
  EXPECT_EQ(proc_caps(shim, "CapEff"), kCapKill | kCapSysBoot);
  EXPECT_EQ(proc_caps(shim, "CapPrm"), kCapKill | kCapSysBoot);
  EXPECT_EQ(proc_caps(shim, "CapBnd"), kCapKill | kCapSysBoot);
  EXPECT_EQ(proc_status(shim, "NoNewPrivs"), "1");
  EXPECT_EQ(proc_status(shim, "Seccomp"), "2");
  const auto mounts = sandbox::read_text_file(fmt::format("/proc/{}/mountinfo", shim));
  EXPECT_NE(mounts.find(" / / ro,"), std::string::npos) << mounts;
  expect_lock_of(shim);

  // The stand-in's PID as the pod's namespace numbers it (the last NSpid), read while it runs.
  const auto ns_pids = proc_status(apiserver, "NSpid");
  const auto apiserver_in_pod = ns_pids.substr(ns_pids.find_last_of(" \t") + 1);

  expect_held_reboot_with_one_sigterm(p, "sidecar");
  // The shim found kube-apiserver by name in the shared namespace: the PID it signalled is the
  // stand-in's.
  const auto forwarded = first(p, "SignalForwarded");
  ASSERT_TRUE(forwarded);
  EXPECT_EQ(sandbox::json_string_field(forwarded->line, "target_pid").value_or(""),
            apiserver_in_pod)
      << forwarded->line;
}

// Issue 35, item 1: the sidecar's state volume is a memory emptyDir, a tmpfs whose root is mode
// 1777. The shim kept its record there, could not trust it after a restart, and signalled
// kube-apiserver again (2 SIGTERMs). Now the volume is /run and the shim's directory in it is its
// own: killed mid-hold and started again, as kubelet restarts a container, it signals nothing more.
TEST_F(PodmanKubePlay, SidecarKilledDuringAHoldAndRestartedSignalsKubeApiserverOnce) {
  // The stand-in serves long after its SIGTERM, so that it outlasts the restart: a second SIGTERM
  // would make it exit at once.
  const auto p = play("kube-apiserver-sidecar.yaml", "60s");
  ASSERT_TRUE(wait_ready(p)) << "the sidecar never became ready with its lock";
  const pid_t shim = host_pid(p, "shutdown-shim");
  ASSERT_GT(shim, 0);
  // The volume as the manifest mounts it: a tmpfs of mode 1777, and the shim's directory in it.
  const auto mounts = sandbox::read_text_file(fmt::format("/proc/{}/mountinfo", shim));
  EXPECT_NE(mounts.find(" /run rw,"), std::string::npos) << mounts;
  struct stat volume {};
  struct stat state {};
  ASSERT_EQ(::stat(fmt::format("/proc/{}/root/run", shim).c_str(), &volume), 0);
  ASSERT_EQ(::stat(fmt::format("/proc/{}/root/run/shutdown-shim", shim).c_str(), &state), 0);
  EXPECT_EQ(volume.st_mode & 07777, 01777u);
  EXPECT_EQ(state.st_mode & 07777, 0700u);

  // Another delay lock keeps logind waiting while the shim is gone.
  auto harness_lock = sb().take_inhibitor("containers-restart", "keeps logind waiting");
  sandbox::http_prober prober(p.shim_port);
  const auto t0 = sb().reboot();
  const auto deadline = std::chrono::steady_clock::now() + shim_it::kEventTimeout;
  while ((stand_in_signals(p, "kube-apiserver").empty() || !first(p, "SignalForwarded")) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(count(p, "SignalForwarded"), 1u) << "the shim never signalled";
  ASSERT_EQ(::kill(shim, SIGKILL), 0);
  // As kubelet would restart it (podman's own restart policy may have done so already).
  EXPECT_EQ(run({podman(), "start", p.container("shutdown-shim")}).status, 0);
  while (!first(p, "ShutdownResumed") && stand_in_signals(p, "kube-apiserver").size() < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  // A shim that signals again does so at start-up or when the drain it took over ends.
  std::this_thread::sleep_for(std::chrono::microseconds(kDrainUs) + 1s);
  const pid_t restarted = host_pid(p, "shutdown-shim");
  harness_lock.release();
  held_reboot r;
  r.reboot_us = t0;
  r.start = sb().wait_for_start_unit("reboot.target", shim_it::kEventTimeout, t0);
  prober.stop();
  r.unready_us = prober.first_failure_at(t0);
  const auto signals = stand_in_signals(p, "kube-apiserver");
  figures("sidecar killed mid-hold and restarted", r, signals);
  EXPECT_NE(restarted, shim) << "the shim's container did not start again";
  EXPECT_TRUE(first(p, "ShutdownResumed")) << "the restarted shim did not resume the hold";
  EXPECT_EQ(signals.size(), 1u) << "the restarted shim signalled kube-apiserver again";
  EXPECT_EQ(count(p, "SignalForwarded"), 1u);
  EXPECT_TRUE(r.start) << "logind never started reboot.target";
}

TEST_F(PodmanKubePlay, SidecarStoppedAloneLeavesKubeApiserverAlone) {
  const auto p = play("kube-apiserver-sidecar.yaml");
  ASSERT_TRUE(wait_ready(p));
  const pid_t apiserver = host_pid(p, "kube-apiserver");

  const auto before = sandbox::monotonic_us();
  const auto stopped = run({podman(), "stop", p.container("shutdown-shim")});
  const auto after = sandbox::monotonic_us();
  EXPECT_EQ(stopped.status, 0) << stopped.output;
  std::printf("FIGURES sidecar stopped alone: podman stop took %.0f ms, exit code %s\n",
              shim_it::ms_between(before, after),
              podman_inspect(p.container("shutdown-shim"), "{{.State.ExitCode}}").c_str());

  // --forward-on-sigterm=never: the shim's own stop is not kube-apiserver's, and no shutdown
  // either: a Restart record, never a ShutdownInitiated (issue 22: a restart is no shutdown).
  EXPECT_EQ(count(p, "Restart"), 1u);
  EXPECT_EQ(count(p, "ShutdownInitiated"), 0u);
  EXPECT_EQ(count(p, "SignalForwarded"), 0u);
  EXPECT_TRUE(stand_in_signals(p, "kube-apiserver").empty());
  EXPECT_EQ(::kill(apiserver, 0), 0) << "kube-apiserver is gone";
  EXPECT_EQ(podman_inspect(p.container("kube-apiserver"), "{{.State.Status}}"), "running");
  EXPECT_TRUE(sb().wait_for_inhibitor("shutdown-shim", false, shim_it::kEventTimeout))
      << "the stopped shim's lock is still there";
}

TEST_F(PodmanKubePlay, WrapperHoldsARebootAndSignalsItsChildOnce) {
  const auto p = play("kube-apiserver-wrapper.yaml");
  ASSERT_TRUE(wait_ready(p)) << "the wrapper never became ready with its lock";
  const pid_t shim = host_pid(p, "kube-apiserver");
  ASSERT_GT(shim, 0);
  EXPECT_EQ(proc_caps(shim, "CapEff"), kCapSysBoot);
  EXPECT_EQ(proc_caps(shim, "CapBnd"), kCapSysBoot);
  expect_lock_of(shim);
  expect_held_reboot_with_one_sigterm(p, "wrapper");
  EXPECT_EQ(count(p, "TargetExited"), 1u);
}

// The MachineConfig's unit on a node: the shim in the host's PID and network namespaces takes the
// lock over the mounted bus socket, and at a Reboot signals the kube-apiserver container's PID 1,
// watch-termination, once. The stand-in runs on the host as watch-termination (a link named so:
// /proc/PID/comm is the name it was executed by, cut to 15 characters).
TEST_F(PodmanKubePlay, MachineConfigUnitHoldsARebootAndSignalsWatchTerminationOnce) {
  const fs::path link = sb().path("bin/watch-termination");
  fs::create_directories(link.parent_path());
  fs::create_symlink(sb().tools().fake_apiserver, link);
  auto stand_in =
      describe_apiserver("watch-termination", shim_it::api_delay(kApiserverShutdownDelay));
  stand_in.argv[0] = link.string();
  stand_in.process = &sb().spawn(stand_in.name, stand_in.argv);
  ASSERT_TRUE(wait_apiserver_listening(stand_in));
  const pid_t target = *stand_in.pid();
  EXPECT_EQ(sandbox::read_text_file(fmt::format("/proc/{}/comm", target)), "watch-terminati\n");

  // systemd's notify socket for the Type=notify unit: --sdnotify=container hands it to the shim,
  // whose READY=1 comes once the lock is held.
  shim_it::notify_socket notify(sb().path("notify.sock"));
  pod p;
  ASSERT_EQ(run_machineconfig_unit(p, {notify.env()}), 0) << "podman run of the unit's line failed";
  ASSERT_TRUE(notify.wait_for("READY=1", shim_it::kStartTimeout))
      << "no READY=1 from the container";
  EXPECT_TRUE(sb().find_inhibitor("shutdown-shim")) << "READY=1 before the lock was held";
  ASSERT_TRUE(wait_ready(p)) << "the unit's shim never became ready with its lock";
  const pid_t shim = host_pid(p, "shim");
  ASSERT_GT(shim, 0);

  // --pid=host, --network=host: the host's namespaces; exactly KILL and SYS_BOOT; read-only root.
  for (const char* ns : {"pid", "net"}) {
    EXPECT_EQ(fs::read_symlink(fmt::format("/proc/{}/ns/{}", shim, ns)),
              fs::read_symlink(fmt::format("/proc/self/ns/{}", ns)))
        << ns;
  }
  EXPECT_EQ(proc_caps(shim, "CapEff"), kCapKill | kCapSysBoot);
  EXPECT_EQ(proc_caps(shim, "CapBnd"), kCapKill | kCapSysBoot);
  EXPECT_EQ(proc_status(shim, "NoNewPrivs"), "1");
  const auto mounts = sandbox::read_text_file(fmt::format("/proc/{}/mountinfo", shim));
  EXPECT_NE(mounts.find(" / / ro,"), std::string::npos) << mounts;
  expect_lock_of(shim);

  const auto r = reboot(p);
  std::vector<std::uint64_t> signals;
  for (const auto& line : stand_in.signals()) signals.push_back(line.usec);
  expect_held_with_one_sigterm(p, "machineconfig unit", r, signals);
  // The host's PID: the shim found the stand-in by name in the host's namespace.
  const auto forwarded = first(p, "SignalForwarded");
  ASSERT_TRUE(forwarded);
  EXPECT_EQ(sandbox::json_string_field(forwarded->line, "target_pid").value_or(""),
            std::to_string(target))
      << forwarded->line;
  EXPECT_TRUE(stand_in.process->wait_for_exit(shim_it::kEventTimeout)) << "the stand-in runs on";
  EXPECT_EQ(count(p, "TargetExited"), 1u);
  EXPECT_EQ(count(p, "InhibitorReleased"), 1u);
  // docs/install.md's check of a node: `report` in the running container reads its event log.
  const auto report = run({podman(), "exec", p.container("shim"), "shutdown-shim", "report"});
  EXPECT_NE(report.output.find("PrepareForShutdown(true)"), std::string::npos) << report.output;
}

}  // namespace
