// kubelet_outlook: the one policy (issues 13 and 19), and what the check kubelet-shutdown says, row
// by row of the table in kubelet_outlook.hpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "kubelet/kubelet_outlook.hpp"
#include "kubelet/kubelet_watch.hpp"
#include "log_test_support.hpp"
#include "readiness/shim_status.hpp"
#include "run_until.hpp"
#include "test_child.hpp"

namespace shim {
namespace {

using dropin_read = result<std::optional<std::uint64_t>>;

using namespace std::chrono_literals;
using testing::HasSubstr;

using config_read = result<kubelet_shutdown_config>;

// What a kubelet_watch reports, counted.
struct counted_kubelet_events final : kubelet_events {
  void kubelet_gone() override { ++gone; }
  void kubelet_changed() override { ++changes; }
  int gone = 0;
  int changes = 0;
};
using manifest_read = result<static_pod_priority>;

// drain 70 s + exit 65 s, as the unit's defaults.
kubelet_outlook::settings mode(bool wrapper, bool files = true) {
  return {.wrapper = wrapper,
          .drain_delay = 70s,
          .hold_needed = 135s,
          .config_given = files,
          .manifest_given = files};
}

kubelet_shutdown_config groups(std::vector<kubelet_priority_group> g) {
  kubelet_shutdown_config c;
  c.by_pod_priority = std::move(g);
  return c;
}

static_pod_priority pod(std::optional<std::int32_t> priority, std::int64_t grace = 150) {
  return {.priority = priority,
          .priority_class_name = {},
          .termination_grace_seconds = grace,
          .namespace_name = "kube-system"};
}

kubelet_outlook outlook(kubelet_outlook::settings s, kubelet_shutdown_config c,
                        static_pod_priority p, std::optional<std::uint32_t> lock = 812) {
  kubelet_outlook o(s);
  o.set_files(config_read::success(std::move(c)), manifest_read::success(std::move(p)),
              dropin_read::success(std::nullopt));
  o.set_lock(lock);
  return o;
}

TEST(KubeletOutlook, NothingToSayWithoutKubeletOrFiles) {
  kubelet_outlook o(mode(false, false));
  o.set_files(config_read::success({}), manifest_read::success({}),
              dropin_read::success(std::nullopt));
  EXPECT_FALSE(o.applies());
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_FALSE(o.second_signal());
  EXPECT_FALSE(o.warning());
}

// Every row of the policy table in kubelet_outlook.hpp: who signals, whether a second SIGTERM may
// come, whether it is a warning. Sidecar mode is attach mode to the outlook (wrapper false).
TEST(KubeletOutlook, ThePolicyRowByRow) {
  const auto first_group = groups({{0, 150}, {2000000000, 10}});
  const auto later_group = groups({{0, 30}, {2000000000, 150}});
  struct row {
    std::string what;
    kubelet_outlook o;
    bool leaves;
    bool second;
    bool warns;
  };
  kubelet_outlook lock_no_files(mode(false, false));
  lock_no_files.set_lock(812);
  kubelet_outlook config_no_manifest(
      {.wrapper = false, .drain_delay = 70s, .hold_needed = 135s, .config_given = true});
  config_no_manifest.set_files(config_read::success(first_group), manifest_read::success({}),
                               dropin_read::success(std::nullopt));
  config_no_manifest.set_lock(812);
  kubelet_outlook unreadable(mode(false));
  unreadable.set_files(config_read::failure("--kubelet-config=/x: No such file or directory"),
                       manifest_read::success(pod(std::nullopt)),
                       dropin_read::success(std::nullopt));
  unreadable.set_lock(812);
  std::vector<row> rows;
  rows.push_back({"attach, kubelet's first group", outlook(mode(false), first_group, pod(0)), true,
                  false, false});
  rows.push_back({"attach, a later group (kubeadm's and OpenShift's priority)",
                  outlook(mode(false), later_group, pod(kSystemNodeCriticalPriority)), true, false,
                  false});
  rows.push_back({"attach, no kubelet lock",
                  outlook(mode(false), later_group, pod(kSystemNodeCriticalPriority), std::nullopt),
                  false, false, false});
  rows.push_back({"attach, a config that turns GNS off",
                  outlook(mode(false), kubelet_shutdown_config{}, pod(std::nullopt)), false, true,
                  true});
  rows.push_back({"attach, no --static-pod-manifest: not known as kubelet's pod",
                  std::move(config_no_manifest), false, true, true});
  rows.push_back({"attach, a file unreadable", std::move(unreadable), false, true, true});
  rows.push_back({"attach, no --kubelet-config", std::move(lock_no_files), false, true, true});
  rows.push_back({"wrapper, kubelet's first group", outlook(mode(true), first_group, pod(0)), false,
                  false, false});
  rows.push_back({"wrapper, a later group",
                  outlook(mode(true), later_group, pod(kSystemNodeCriticalPriority)), false, false,
                  false});
  rows.push_back({"wrapper, no --kubelet-config",
                  [] {
                    kubelet_outlook w(mode(true, false));
                    w.set_lock(812);
                    return w;
                  }(),
                  false, false, false});
  for (const auto& r : rows) {
    SCOPED_TRACE(r.what + ": " + r.o.summary());
    EXPECT_EQ(r.o.leaves_signal_to_kubelet(), r.leaves);
    EXPECT_EQ(r.o.second_signal(), r.second);
    EXPECT_EQ(r.o.warning().has_value(), r.warns);
    EXPECT_THAT(r.o.fields(), testing::Contains(std::pair<std::string, std::string>(
                                  "shim_signals", r.leaves ? "false" : "true")));
    // The old advice is gone: no second signal is left to fix where the plan is known.
    EXPECT_THAT(r.o.summary(), testing::Not(HasSubstr("remove the static pod's priority")));
    EXPECT_THAT(r.o.summary(), testing::Not(HasSubstr("container's wrapper")));
  }
}

TEST(KubeletOutlook, AttachWithKubeletStoppingFirstLeavesTheSignalToKubelet) {
  const auto o = outlook(mode(false), groups({{0, 150}, {2000000000, 10}}), pod(std::nullopt));
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_EQ(o.summary(),
            "kubelet (pid 812) holds a graceful-node-shutdown delay lock; kubelet's SIGTERM "
            "reaches kube-apiserver at +0s and its SIGKILL at +150s (pod priority 0, group 1 of 2: "
            "priority 0, 150 seconds): the shim sends no signal of its own, kubelet's is the one; "
            "if kubelet's lock goes before kube-apiserver has exited, the shim signals it at once");
}

// Issue 19: kube-apiserver in kubelet's critical group (priority 2000001000) is left to kubelet
// too, and the window of kubelet's SIGTERM is said and recorded.
TEST(KubeletOutlook, ALaterGroupLeavesTheSignalToKubeletWithItsWindow) {
  const auto o = outlook(mode(false), groups({{0, 30}, {2000000000, 150}}), pod(2000001000, 150));
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.second_signal());
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_FALSE(o.warning());
  EXPECT_THAT(o.summary(), HasSubstr("kubelet's SIGTERM reaches kube-apiserver at +0s..+30s and "
                                     "its SIGKILL at +150s..+180s"));
  EXPECT_THAT(o.summary(), HasSubstr("the shim sends no signal of its own"));
  using field = std::pair<std::string, std::string>;
  EXPECT_THAT(o.window_fields(), testing::ElementsAre(field{"kubelet_sigterm_earliest_s", "0"},
                                                      field{"kubelet_sigterm_latest_s", "30"},
                                                      field{"kubelet_sigkill_earliest_s", "150"},
                                                      field{"kubelet_sigkill_latest_s", "180"}));
}

TEST(KubeletOutlook, TheIssuesExampleIsACutDrainWithItsFix) {
  // shutdownGracePeriod 30 s, critical pods 10 s: a static pod without priority is stopped at +0
  // and killed at +20 s; with the default terminationGracePeriodSeconds (30 s) that stays 20 s.
  kubelet_shutdown_config c;
  c.grace_period = 30s;
  c.critical_pods_period = 10s;
  const auto o = outlook(mode(false), c, pod(std::nullopt, 30));
  EXPECT_TRUE(o.cuts_drain());
  EXPECT_TRUE(o.leaves_signal_to_kubelet()) << "the cut does not change who signals";
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(),
              HasSubstr("kubelet's SIGKILL cuts the drain from 1m10s to 20s and the pod's "
                        "terminationGracePeriodSeconds from 30s to 20s (drain-delay + "
                        "exit-timeout is 2m15s): give kube-apiserver's group 135s in kubelet's "
                        "config file (shutdownGracePeriod: 145s, shutdownGracePeriodCriticalPods: "
                        "10s); and give the static pod's manifest terminationGracePeriodSeconds: "
                        "135"));
}

// kubeadm's current manifest (priority 2000001000, no terminationGracePeriodSeconds: 30 s) with
// 30 s / 10 s: the critical group's 10 s is the cut, fixed in kubelet's config and the manifest.
TEST(KubeletOutlook, KubeadmsManifestInTheCriticalGroupGetsTheCriticalPeriodsFix) {
  kubelet_shutdown_config c;
  c.grace_period = 30s;
  c.critical_pods_period = 10s;
  static_pod_priority kubeadm{.priority = kSystemNodeCriticalPriority,
                              .priority_class_name = "system-node-critical",
                              .termination_grace_seconds = std::nullopt,
                              .namespace_name = "kube-system"};
  const auto o = outlook(mode(false), c, kubeadm);
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(), HasSubstr("at +0s..+20s and its SIGKILL at +10s..+30s"));
  EXPECT_THAT(*o.warning(),
              HasSubstr("give kube-apiserver's group 135s in kubelet's config file "
                        "(shutdownGracePeriod: 155s, shutdownGracePeriodCriticalPods: 135s); and "
                        "give the static pod's manifest terminationGracePeriodSeconds: 135"));
}

// OpenShift's two-node control plane: MCO's 90 s / 60 s and the operator's pod (135 s). The fix is
// a KubeletConfig for the master pool, never an edit of the operator's manifest.
TEST(KubeletOutlook, AnOperatorsManifestGetsAKubeletConfigAndNoManifestEdit) {
  kubelet_shutdown_config c;
  c.grace_period = 90s;
  c.critical_pods_period = 60s;
  static_pod_priority openshift{.priority = kSystemNodeCriticalPriority,
                                .priority_class_name = "system-node-critical",
                                .termination_grace_seconds = 135,
                                .namespace_name = "openshift-kube-apiserver"};
  const auto o = outlook(mode(false), c, openshift);
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.second_signal());
  ASSERT_TRUE(o.warning());
  const std::string w = *o.warning();
  EXPECT_THAT(w, HasSubstr("kubelet's SIGTERM reaches kube-apiserver at +0s..+30s and its SIGKILL "
                           "at +60s..+90s"));
  EXPECT_THAT(w, HasSubstr("cuts the drain from 1m10s to 1m0s and the pod's "
                           "terminationGracePeriodSeconds from 135s to 60s"));
  EXPECT_THAT(w, HasSubstr("give kube-apiserver's group 135s with an OpenShift KubeletConfig for "
                           "the master pool (apiVersion: machineconfiguration.openshift.io/v1, "
                           "kind: KubeletConfig, spec.machineConfigPoolSelector.matchLabels: "
                           "{pools.operator.machineconfiguration.openshift.io/master: \"\"}, "
                           "spec.kubeletConfig: {shutdownGracePeriod: 165s, "
                           "shutdownGracePeriodCriticalPods: 135s})"));
  EXPECT_THAT(w, testing::Not(HasSubstr("manifest")));
  EXPECT_THAT(w, testing::Not(HasSubstr("priority:")));

  // The operator's pod grace shorter than the shim's hold: the shim's flags are what can give.
  const auto short_pod = outlook(mode(false), groups({{0, 10}, {2000000000, 150}}),
                                 {.priority = kSystemNodeCriticalPriority,
                                  .priority_class_name = {},
                                  .termination_grace_seconds = 100,
                                  .namespace_name = "openshift-kube-apiserver"});
  ASSERT_TRUE(short_pod.warning());
  EXPECT_THAT(*short_pod.warning(),
              HasSubstr("cuts kube-apiserver's exit to 30s after the drain (drain-delay + "
                        "exit-timeout is 2m15s): keep --drain-delay + --exit-timeout within the "
                        "pod's 100s (its terminationGracePeriodSeconds is its operator's)"));
  EXPECT_THAT(*short_pod.warning(), testing::Not(HasSubstr("KubeletConfig")))
      << "the group's 150 s already covers the pod's 100 s";
}

TEST(KubeletOutlook, ByPodPriorityGroupsAreFixedInTheirOwnEntry) {
  const auto o = outlook(mode(false), groups({{0, 10}, {2000000000, 60}}), pod(2000001000, 150));
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(),
              HasSubstr("give kube-apiserver's group 150s in kubelet's config file "
                        "(shutdownGracePeriodByPodPriority: its entry {priority: 2000000000, "
                        "shutdownGracePeriodSeconds: 150}, now 60)"));
}

TEST(KubeletOutlook, AKillAfterTheDrainCutsTheExitOnly) {
  const auto o = outlook(mode(false), groups({{0, 100}}), pod(std::nullopt, 100));
  EXPECT_TRUE(o.cuts_drain());
  EXPECT_THAT(o.summary(), HasSubstr("cuts kube-apiserver's exit to 30s after the drain"));
}

TEST(KubeletOutlook, APodGraceShorterThanItsGroupIsTheCut) {
  const auto o = outlook(mode(false), groups({{0, 150}}), pod(std::nullopt, 30));
  EXPECT_TRUE(o.cuts_drain());
  EXPECT_THAT(o.summary(), HasSubstr("cut to the pod's 30s"));
}

// The group's grace covers the hold but not the pod's own grace, to which kube-apiserver's
// shutdown is sized: kubelet kills it before that is over.
TEST(KubeletOutlook, AGroupShorterThanThePodsGraceIsACutToo) {
  const auto o = outlook(mode(false), groups({{0, 140}}), pod(std::nullopt, 150));
  EXPECT_TRUE(o.cuts_drain());
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(),
              HasSubstr("kubelet's SIGKILL cuts the pod's terminationGracePeriodSeconds from 150s "
                        "to 140s (drain-delay + exit-timeout is 2m15s): give kube-apiserver's "
                        "group 150s"));
}

TEST(KubeletOutlook, WrapperModeSignalsItselfAndStillReportsACut) {
  const auto first = outlook(mode(true), groups({{0, 150}}), pod(std::nullopt));
  EXPECT_FALSE(first.leaves_signal_to_kubelet());
  EXPECT_FALSE(first.warning());
  EXPECT_THAT(first.summary(), HasSubstr("its SIGTERM reaches the shim, which forwards one"));
  // The SIGKILL reaches the container whatever the mode.
  const auto cut = outlook(mode(true), groups({{0, 10}}), pod(std::nullopt));
  EXPECT_TRUE(cut.cuts_drain());
}

TEST(KubeletOutlook, WithoutKubeletsLockTheFilesDecideNothing) {
  const auto o = outlook(mode(false), groups({{0, 150}}), pod(std::nullopt), std::nullopt);
  EXPECT_TRUE(o.applies());
  EXPECT_FALSE(o.leaves_signal_to_kubelet()) << "kubelet is not running GNS: nobody else signals";
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_FALSE(o.warning());
  EXPECT_THAT(o.summary(), HasSubstr("kubelet holds no graceful-node-shutdown lock"));
  EXPECT_THAT(o.summary(), HasSubstr("once its lock is listed: kubelet's SIGTERM reaches"));
}

TEST(KubeletOutlook, KubeletsLockWithoutItsFilesIsAWarningInAttachModeOnly) {
  kubelet_outlook attach(mode(false, false));
  attach.set_files(config_read::success({}), manifest_read::success({}),
                   dropin_read::success(150'000'000));
  attach.set_lock(812);
  EXPECT_FALSE(attach.leaves_signal_to_kubelet());
  EXPECT_TRUE(attach.second_signal());
  ASSERT_TRUE(attach.warning());
  EXPECT_THAT(*attach.warning(), HasSubstr("for 2m30s (99-kubelet.conf)"));
  EXPECT_THAT(*attach.warning(), HasSubstr("give --kubelet-config and --static-pod-manifest"));
  kubelet_outlook no_manifest(
      {.wrapper = false, .drain_delay = 70s, .hold_needed = 135s, .config_given = true});
  no_manifest.set_files(config_read::success(groups({{0, 150}})), manifest_read::success({}),
                        dropin_read::success(std::nullopt));
  no_manifest.set_lock(812);
  ASSERT_TRUE(no_manifest.warning());
  EXPECT_THAT(*no_manifest.warning(), testing::EndsWith(": give --static-pod-manifest"));
  kubelet_outlook wrapper(mode(true, false));
  wrapper.set_lock(812);
  EXPECT_FALSE(wrapper.warning());
  EXPECT_THAT(wrapper.summary(), HasSubstr("in wrapper mode its SIGTERM reaches the shim"));
}

TEST(KubeletOutlook, UnreadableFilesAreSaidAndTheShimSignalsItself) {
  kubelet_outlook o(mode(false));
  o.set_files(config_read::failure("--kubelet-config=/x: cannot open: No such file or directory"),
              manifest_read::success({}), dropin_read::success(std::nullopt));
  o.set_lock(812);
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(), HasSubstr("--kubelet-config=/x: cannot open"));
}

TEST(KubeletOutlook, AConfigThatTurnsGnsOffIsNotKubeletsWhileItsLockIsListed) {
  const auto o = outlook(mode(false), kubelet_shutdown_config{}, pod(std::nullopt));
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_THAT(o.summary(), HasSubstr("turns graceful node shutdown off"));
}

TEST(KubeletOutlook, A99KubeletConfThatDisagreesWithTheConfigIsPointedOut) {
  kubelet_outlook o(mode(false));
  o.set_files(config_read::success(groups({{0, 150}})), manifest_read::success(pod(std::nullopt)),
              dropin_read::success(30'000'000));
  o.set_lock(812);
  EXPECT_THAT(o.summary(), HasSubstr("99-kubelet.conf asks logind for 30s, --kubelet-config adds "
                                     "up to 2m30s: is it the file kubelet runs with?"));
}

// The lock gone says only what the next shutdown will be; a hold that counted kubelet's signal
// is shutdown_sequence::kubelet_gone()'s to settle.
TEST(KubeletOutlook, KubeletsLockGoingAwayEndsThePolicy) {
  auto o = outlook(mode(false), groups({{0, 150}}), pod(std::nullopt));
  ASSERT_TRUE(o.leaves_signal_to_kubelet());
  o.set_lock(std::nullopt);
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.plan());
  EXPECT_TRUE(o.window_fields().empty());
}

TEST(KubeletOutlook, Kubelets99ConfIsReadFromLogindsDropinDirectory) {
  test::temp_dir dir;
  EXPECT_EQ(kubelet_dropin_usec(dir.path()).value(), std::nullopt);
  std::ofstream(std::filesystem::path(dir.path()) / "99-kubelet.conf")
      << "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=45\n";
  EXPECT_EQ(kubelet_dropin_usec(dir.path()).value(), 45'000'000u);

  // One that cannot be read is a failure, not "no value" (issue 34: the one error convention).
  test::temp_dir other;
  std::filesystem::create_directory(std::filesystem::path(other.path()) / "99-kubelet.conf");
  const auto unreadable = kubelet_dropin_usec(other.path());
  ASSERT_FALSE(unreadable.ok());
  EXPECT_THAT(unreadable.error(), HasSubstr("99-kubelet.conf: a directory, not a regular file"));

  kubelet_outlook attach(mode(false, false));
  attach.set_files(config_read::success({}), manifest_read::success({}), unreadable);
  attach.set_lock(812);
  ASSERT_TRUE(attach.warning());
  EXPECT_THAT(*attach.warning(), HasSubstr("(" + unreadable.error() + ")"));
}

// /readyz?verbose shows a check's line up to a cap: the longest line the shim writes of kubelet,
// with every number at its bound, must fit whole (its end is the fix). The longest: an operator's
// manifest (the KubeletConfig), priority groups (their entry), every cut and fix, and a
// 99-kubelet.conf that disagrees.
TEST(KubeletOutlook, TheLongestLineIsNotCut) {
  std::vector<kubelet_priority_group> g;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(kMaxKubeletPriorityGroups) - 1; ++i) {
    g.push_back({std::numeric_limits<std::int32_t>::min() + i, kMaxKubeletGraceSeconds});
  }
  g.push_back({std::numeric_limits<std::int32_t>::max(), kMaxKubeletGraceSeconds - 1});
  shim_status status;
  status.kubelet = kubelet_outlook({.wrapper = false,
                                    .drain_delay = 23h + 59min + 59s + 999ms,
                                    .hold_needed = 47h + 59min + 59s + 999ms,
                                    .config_given = true,
                                    .manifest_given = true});
  status.kubelet.set_files(
      config_read::success(groups(g)),
      manifest_read::success({.priority = std::numeric_limits<std::int32_t>::max(),
                              .priority_class_name = {},
                              .termination_grace_seconds = kMaxKubeletGraceSeconds,
                              .namespace_name = "openshift-kube-apiserver"}),
      dropin_read::success(std::numeric_limits<std::uint64_t>::max()));
  status.kubelet.set_lock(4'194'304);
  const std::string full = status.kubelet.summary();
  EXPECT_THAT(full, HasSubstr("KubeletConfig"));
  EXPECT_THAT(full, HasSubstr("the pod's terminationGracePeriodSeconds from"));
  EXPECT_THAT(full, HasSubstr("keep --drain-delay + --exit-timeout within"));
  EXPECT_THAT(full, testing::EndsWith("is it the file kubelet runs with?"));
  const auto checks = status.checks();
  const auto it = std::find_if(checks.begin(), checks.end(),
                               [](const auto& c) { return c.name == "kubelet-shutdown"; });
  ASSERT_NE(it, checks.end());
  EXPECT_EQ(it->detail, full) << full.size() << " bytes";
  std::cout << "the longest kubelet-shutdown line: " << full.size() << " bytes" << std::endl;
}

TEST(KubeletOutlook, KubeletsFilesAreReadWithTheFlagNamedInEachFailure) {
  test::temp_dir dir;
  const std::filesystem::path d = dir.path();
  const auto none = read_kubelet_files("", "", d);
  EXPECT_TRUE(none.config.ok());
  EXPECT_TRUE(none.manifest.ok());
  EXPECT_EQ(none.dropin_usec.value(), std::nullopt);
  std::ofstream(d / "config.yaml") << "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n";
  const auto read =
      read_kubelet_files((d / "config.yaml").string(), (d / "missing.yaml").string(), d);
  ASSERT_TRUE(read.config.ok());
  EXPECT_EQ(read.config.value().grace_period, 30s);
  ASSERT_FALSE(read.manifest.ok());
  EXPECT_THAT(read.manifest.error(),
              testing::StartsWith("--static-pod-manifest=" + (d / "missing.yaml").string() + ": "));
}

// Issue 22, item 5: the outlook, some 400 bytes, was logged twice at every start (without the lock,
// then with it once logind listed it). Now once, once logind's locks are listed, in a few words;
// the check (and the KubeletShutdown record at a shutdown) keep it in full.
TEST(KubeletWatch, TheOutlookIsSaidOnceAtStartInAFewWords) {
  test::temp_dir dir;
  const std::filesystem::path d = dir.path();
  std::ofstream(d / "config.yaml") << "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n"
                                      "shutdownGracePeriodCriticalPods: 10s\n";
  std::ofstream(d / "kube-apiserver.yaml")
      << "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: "
         "kube-system\nspec:\n  priority: 2000001000\n  terminationGracePeriodSeconds: 5\n";
  kubelet_watch::settings cfg;
  cfg.kubelet_config = (d / "config.yaml").string();
  cfg.static_pod_manifest = (d / "kube-apiserver.yaml").string();
  cfg.logind_conf_dir = d.string();
  test::captured_output out;
  logger log(log_format::text, out.fd(), true);
  kubelet_outlook outlook(
      {.drain_delay = 1s, .hold_needed = 2s, .config_given = true, .manifest_given = true});
  counted_kubelet_events heard;
  boost::asio::io_context io;
  kubelet_watch watch(io, cfg, log, outlook, heard);
  watch.start();
  EXPECT_EQ(out.text(), "") << "nothing said before logind's list";
  const logind_inhibitor::listed_lock kubelet{.what = "shutdown",
                                              .who = std::string(kKubeletInhibitWho),
                                              .why = std::string(kKubeletInhibitWhy),
                                              .mode = "delay",
                                              .uid = 0,
                                              .pid = 812};
  watch.locks_listed({kubelet});
  watch.locks_listed({kubelet});  // listed again, nothing new
  EXPECT_EQ(heard.changes, 1);
  const auto lines = test::split_lines(out.text());
  ASSERT_EQ(lines.size(), 1u) << out.text();
  EXPECT_EQ(lines[0],
            "<5>kubelet (pid 812) sends kube-apiserver its SIGTERM, the shim none (detail: "
            "/readyz?verbose)");
  EXPECT_THAT(outlook.summary(), HasSubstr("the shim sends no signal of its own"));
  EXPECT_GT(outlook.summary().size(), 4 * lines[0].size()) << outlook.summary();

  // No lock listed: said once all the same, at the first list.
  test::captured_output none_out;
  logger none_log(log_format::text, none_out.fd(), true);
  kubelet_outlook none_outlook(
      {.drain_delay = 1s, .hold_needed = 2s, .config_given = true, .manifest_given = true});
  counted_kubelet_events none_heard;
  kubelet_watch none(io, cfg, none_log, none_outlook, none_heard);
  none.start();
  none.locks_listed({});
  none.locks_listed({});
  EXPECT_THAT(test::split_lines(none_out.text()),
              testing::ElementsAre("<5>kubelet holds no shutdown lock: the shim signals "
                                   "kube-apiserver (detail: /readyz?verbose)"));
}

// --- issue 32: kubeadm's etcd beside kube-apiserver, kubelet running on without its lock ---------

// kubeadm's manifests: both at priority 2000001000, so kubelet stops etcd with kube-apiserver.
static_pod_priority kubeadm_pod(std::string name, std::int32_t priority = 2000001000) {
  static_pod_priority p{.priority = priority,
                        .priority_class_name = "system-node-critical",
                        .termination_grace_seconds = std::nullopt,
                        .namespace_name = "kube-system"};
  p.name = name + "-node-1";
  p.component = std::move(name);
  return p;
}

TEST(KubeletOutlook, EtcdInKubeApiserversGroupIsAWarningWithItsFix) {
  kubelet_outlook o(mode(false));
  const auto config = groups({{0, 30}, {2000000000, 150}});
  o.set_files(config_read::success(config), manifest_read::success(kubeadm_pod("kube-apiserver")),
              dropin_read::success(std::nullopt), kubeadm_pod("etcd"));
  o.set_lock(812);
  ASSERT_EQ(o.stops_etcd_with_apiserver(), true);
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(o.summary(), HasSubstr("WARNING: kubelet stops etcd (priority 2000001000) in "
                                     "kube-apiserver's group (group 2 of 2), together with it"));
  EXPECT_THAT(o.summary(), HasSubstr("priorityClassName: system-cluster-critical with priority: "
                                     "2000000000"));
  EXPECT_THAT(o.summary(), HasSubstr("{priority: 2000000000, shutdownGracePeriodSeconds: 135} and "
                                     "{priority: 2000001000, shutdownGracePeriodSeconds: 150}"));
  EXPECT_THAT(o.fields(), testing::Contains(
                              log_fields::value_type("kubelet_stops_etcd_with_apiserver", "true")));

  // Its fix applied: kube-apiserver in a group of its own before etcd's.
  kubelet_outlook fixed(mode(false));
  fixed.set_files(config_read::success(groups({{0, 30}, {2000000000, 135}, {2000001000, 150}})),
                  manifest_read::success(kubeadm_pod("kube-apiserver", 2000000000)),
                  dropin_read::success(std::nullopt), kubeadm_pod("etcd"));
  fixed.set_lock(812);
  EXPECT_EQ(fixed.stops_etcd_with_apiserver(), false);
  EXPECT_THAT(fixed.summary(), testing::Not(HasSubstr("etcd")));

  // The fix gives kube-apiserver's group as much as kubelet-shutdown's own check wants: the pod's
  // 30 s (kubeadm's manifest says none) when it is longer than the hold (13 s here, as the e2e's);
  // applied, the node is warned about neither (the e2e's shim-gns-etcd-fixed once found the fix
  // asking 13 s and the check then asking 30).
  kubelet_outlook::settings short_hold = mode(false);
  short_hold.drain_delay = 3s;
  short_hold.hold_needed = 13s;
  kubelet_outlook e2e(short_hold);
  e2e.set_files(config_read::success(groups({{0, 3}, {2000000000, 30}})),
                manifest_read::success(kubeadm_pod("kube-apiserver")),
                dropin_read::success(std::nullopt), kubeadm_pod("etcd"));
  e2e.set_lock(812);
  EXPECT_THAT(e2e.summary(), HasSubstr("{priority: 2000000000, shutdownGracePeriodSeconds: 30} and "
                                       "{priority: 2000001000, shutdownGracePeriodSeconds: 30}"));
  kubelet_outlook e2e_fixed(short_hold);
  e2e_fixed.set_files(config_read::success(groups({{0, 3}, {2000000000, 30}, {2000001000, 30}})),
                      manifest_read::success(kubeadm_pod("kube-apiserver", 2000000000)),
                      dropin_read::success(std::nullopt), kubeadm_pod("etcd"));
  e2e_fixed.set_lock(812);
  EXPECT_EQ(e2e_fixed.stops_etcd_with_apiserver(), false);
  EXPECT_FALSE(e2e_fixed.cuts_drain()) << e2e_fixed.summary();
  EXPECT_FALSE(e2e_fixed.warning()) << e2e_fixed.summary();

  // Not known without etcd's manifest, or without kubelet's plan.
  kubelet_outlook no_etcd(mode(false));
  no_etcd.set_files(config_read::success(config),
                    manifest_read::success(kubeadm_pod("kube-apiserver")),
                    dropin_read::success(std::nullopt));
  no_etcd.set_lock(812);
  EXPECT_EQ(no_etcd.stops_etcd_with_apiserver(), std::nullopt);
}

// kubelet closes its lock itself at the end of a shutdown's handling and, after a cancel, by its
// stale close; it still stops kube-apiserver at the next shutdown. The shim leaves the signal to
// it then too: two SIGTERMs otherwise.
TEST(KubeletOutlook, AKubeletRunningOnWithoutItsLockStillSignals) {
  kubelet_outlook o(mode(false));
  o.set_files(config_read::success(groups({{0, 30}, {2000000000, 150}})),
              manifest_read::success(kubeadm_pod("kube-apiserver")),
              dropin_read::success(std::nullopt));
  o.set_lock(std::nullopt);
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  o.set_lockless(812);
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.second_signal());
  EXPECT_THAT(o.summary(), HasSubstr("kubelet (pid 812) runs on without its graceful-node-shutdown "
                                     "lock"));
  EXPECT_THAT(o.summary(), HasSubstr("the shim sends no signal of its own"));
}

// A kubelet process to follow, and logind's list as the watch gets it.
struct watched_kubelet {
  watched_kubelet() { watch.start(); }
  // kubelet's files in `d`, and the watch's settings naming them.
  static kubelet_watch::settings files_in(const test::temp_dir& d) {
    std::ofstream(d.path() + "/config.yaml")
        << "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n"
           "shutdownGracePeriodCriticalPods: 10s\n";
    std::ofstream(d.path() + "/kube-apiserver.yaml")
        << "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\nspec:\n  priority: "
           "2000001000\n";
    return {.kubelet_config = d.path() + "/config.yaml",
            .static_pod_manifest = d.path() + "/kube-apiserver.yaml",
            .logind_conf_dir = d.path()};
  }
  static logind_inhibitor::listed_lock lock(std::string who, std::string why, pid_t pid) {
    return {.what = "shutdown",
            .who = std::move(who),
            .why = std::move(why),
            .mode = "delay",
            .uid = 0,
            .pid = static_cast<std::uint32_t>(pid)};
  }
  logind_inhibitor::listed_lock own() const { return lock("shutdown-shim", "drain", ::getpid()); }
  logind_inhibitor::listed_lock kubelet() const {
    return lock(std::string(kKubeletInhibitWho), std::string(kKubeletInhibitWhy), process->pid());
  }

  test::temp_dir dir;
  std::unique_ptr<test_child> process = test_child::named("kubelet");
  boost::asio::io_context io;
  test::captured_output out;
  logger log{log_format::text, out.fd(), true};
  kubelet_outlook outlook{
      {.drain_delay = 1s, .hold_needed = 2s, .config_given = true, .manifest_given = true}};
  counted_kubelet_events heard;
  kubelet_watch watch{io, files_in(dir), log, outlook, heard};
};

TEST(KubeletWatch, ALockClosedByAKubeletThatRunsOnIsNotKubeletGone) {
  watched_kubelet k;
  k.watch.locks_listed({k.own(), k.kubelet()});
  ASSERT_TRUE(k.outlook.leaves_signal_to_kubelet());
  k.watch.locks_listed({k.own()});  // its last group's timer, or its stale close
  EXPECT_EQ(k.heard.gone, 0);
  EXPECT_EQ(k.outlook.lockless_pid(), static_cast<std::uint32_t>(k.process->pid()));
  EXPECT_TRUE(k.outlook.leaves_signal_to_kubelet());
  // The kubelet process goes (the reboot stops it, or it crashes): gone now.
  ::kill(k.process->pid(), SIGKILL);
  k.process->wait_exited();
  ASSERT_TRUE(run_until(k.io, [&] { return k.heard.gone > 0; }));
  EXPECT_EQ(k.heard.gone, 1);
  EXPECT_FALSE(k.outlook.leaves_signal_to_kubelet());
}

// The shim's own lock shows only after kubelet's (it was retrying): kubelet is followed from then.
TEST(KubeletWatch, KubeletIsFollowedOnceTheShimsOwnLockIsListed) {
  watched_kubelet k;
  k.watch.locks_listed({k.kubelet()});
  k.watch.locks_listed({k.own(), k.kubelet()});
  k.watch.locks_listed({k.own()});
  EXPECT_EQ(k.heard.gone, 0);
  EXPECT_TRUE(k.outlook.leaves_signal_to_kubelet()) << "kubelet runs on without its lock";
}

TEST(KubeletWatch, ALockGoneWithItsKubeletOrNotFollowableIsKubeletGone) {
  watched_kubelet crashed;
  crashed.watch.locks_listed({crashed.own(), crashed.kubelet()});
  ::kill(crashed.process->pid(), SIGKILL);
  crashed.process->wait_exited();
  crashed.io.poll();  // the pidfd's exit, with the lock still listed: nothing yet
  EXPECT_EQ(crashed.heard.gone, 0);
  crashed.watch.locks_listed({crashed.own()});
  EXPECT_EQ(crashed.heard.gone, 1);
  EXPECT_FALSE(crashed.outlook.leaves_signal_to_kubelet());

  // The shim's own lock not listed with its own PID (a pod's PID namespace): logind's PIDs are
  // not its own, and a lock gone is taken for kubelet gone, as before issue 32.
  watched_kubelet elsewhere;
  elsewhere.watch.locks_listed({elsewhere.kubelet()});
  elsewhere.watch.locks_listed({});
  EXPECT_EQ(elsewhere.heard.gone, 1);
}

}  // namespace
}  // namespace shim
