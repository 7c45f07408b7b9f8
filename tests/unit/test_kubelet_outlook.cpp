// kubelet_outlook: issue 13's one policy, and what the check kubelet-shutdown says, row by row of
// the table in kubelet_outlook.hpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kubelet_outlook.hpp"
#include "log_test_support.hpp"
#include "shim_status.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

using config_read = result<kubelet_shutdown_config>;
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
              std::nullopt);
  o.set_lock(lock);
  return o;
}

TEST(KubeletOutlook, NothingToSayWithoutKubeletOrFiles) {
  kubelet_outlook o(mode(false, false));
  o.set_files(config_read::success({}), manifest_read::success({}), std::nullopt);
  EXPECT_FALSE(o.applies());
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_FALSE(o.warning());
}

TEST(KubeletOutlook, AttachWithKubeletStoppingFirstLeavesTheSignalToKubelet) {
  const auto o = outlook(mode(false), groups({{0, 150}, {2000000000, 10}}), pod(std::nullopt));
  EXPECT_TRUE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.second_signal());
  EXPECT_FALSE(o.cuts_drain());
  EXPECT_FALSE(o.warning());
  EXPECT_EQ(o.summary(),
            "kubelet (pid 812) holds a graceful-node-shutdown delay lock; kubelet's SIGTERM "
            "reaches kube-apiserver at +0s and its SIGKILL at +150s (pod priority 0, group 1 of 2: "
            "priority 0, 150 seconds): the shim sends no signal of its own, kubelet's is the one");
  EXPECT_THAT(o.fields(),
              testing::Contains(std::pair<std::string, std::string>("shim_signals", "false")));
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
  EXPECT_THAT(*o.warning(), HasSubstr("kubelet's SIGKILL cuts the drain from 1m10s to 20s"));
  EXPECT_THAT(*o.warning(), HasSubstr("shutdownGracePeriodSeconds of at least 135"));
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

TEST(KubeletOutlook, APriorityInALaterGroupMeansASecondSignal) {
  const auto o = outlook(mode(false), groups({{0, 30}, {2000000000, 150}}), pod(2000001000, 150));
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_TRUE(o.second_signal());
  EXPECT_FALSE(o.cuts_drain());
  ASSERT_TRUE(o.warning());
  EXPECT_THAT(*o.warning(), HasSubstr("at +0s..+30s"));
  EXPECT_THAT(*o.warning(), HasSubstr("will be a second one"));
}

TEST(KubeletOutlook, WrapperModeNeverLeavesTheSignalNorSeesASecondOne) {
  const auto first = outlook(mode(true), groups({{0, 150}}), pod(std::nullopt));
  EXPECT_FALSE(first.leaves_signal_to_kubelet());
  EXPECT_FALSE(first.second_signal());
  EXPECT_FALSE(first.warning());
  EXPECT_THAT(first.summary(), HasSubstr("its SIGTERM reaches the shim, which forwards one"));
  const auto later = outlook(mode(true), groups({{0, 30}, {100, 150}}), pod(100));
  EXPECT_FALSE(later.second_signal());
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
  EXPECT_THAT(o.summary(),
              HasSubstr("once its lock is listed: kubelet's SIGTERM reaches kube-apiserver"));
}

TEST(KubeletOutlook, KubeletsLockWithoutItsConfigIsAWarningInAttachModeOnly) {
  kubelet_outlook attach(mode(false, false));
  attach.set_files(config_read::success({}), manifest_read::success({}), 150'000'000);
  attach.set_lock(812);
  EXPECT_FALSE(attach.leaves_signal_to_kubelet());
  ASSERT_TRUE(attach.warning());
  EXPECT_THAT(*attach.warning(), HasSubstr("for 2m30s (99-kubelet.conf)"));
  EXPECT_THAT(*attach.warning(), HasSubstr("give --kubelet-config and --static-pod-manifest"));
  kubelet_outlook wrapper(mode(true, false));
  wrapper.set_lock(812);
  EXPECT_FALSE(wrapper.warning());
  EXPECT_THAT(wrapper.summary(), HasSubstr("in wrapper mode its SIGTERM reaches the shim"));
}

TEST(KubeletOutlook, UnreadableFilesAreSaidAndTheShimSignalsItself) {
  kubelet_outlook o(mode(false));
  o.set_files(config_read::failure("--kubelet-config=/x: cannot open: No such file or directory"),
              manifest_read::success({}), std::nullopt);
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
              30'000'000);
  o.set_lock(812);
  EXPECT_THAT(o.summary(), HasSubstr("99-kubelet.conf asks logind for 30s, --kubelet-config adds "
                                     "up to 2m30s: is it the file kubelet runs with?"));
}

TEST(KubeletOutlook, KubeletsLockGoingAwayEndsThePolicy) {
  auto o = outlook(mode(false), groups({{0, 150}}), pod(std::nullopt));
  ASSERT_TRUE(o.leaves_signal_to_kubelet());
  o.set_lock(std::nullopt);
  EXPECT_FALSE(o.leaves_signal_to_kubelet());
  EXPECT_FALSE(o.plan());
}

TEST(KubeletOutlook, Kubelets99ConfIsReadFromLogindsDropinDirectory) {
  test::temp_dir dir;
  EXPECT_FALSE(kubelet_dropin_usec(dir.path()));
  std::ofstream(std::filesystem::path(dir.path()) / "99-kubelet.conf")
      << "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=45\n";
  EXPECT_EQ(kubelet_dropin_usec(dir.path()), 45'000'000u);
}

// /readyz?verbose shows a check's line up to a cap: the longest line the shim writes of kubelet,
// with every number at its bound, must fit whole (its end is the fix).
TEST(KubeletOutlook, TheLongestLineIsNotCut) {
  std::vector<kubelet_priority_group> g;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(kMaxKubeletPriorityGroups) - 1; ++i) {
    g.push_back({i, i == 0 ? kMaxKubeletGraceSeconds : 0});
  }
  g.push_back({kSystemCriticalPriority, kMaxKubeletGraceSeconds});
  shim_status status;
  status.kubelet = kubelet_outlook(mode(false));
  status.kubelet.set_files(config_read::success(groups(g)),
                           manifest_read::success(pod(kSystemNodeCriticalPriority, 30)),
                           150'000'000);
  status.kubelet.set_lock(4'194'304);
  const std::string full = status.kubelet.summary();
  EXPECT_THAT(full, HasSubstr("will be a second one"));
  EXPECT_THAT(full, HasSubstr("cuts"));
  EXPECT_THAT(full, testing::EndsWith("is it the file kubelet runs with?"));
  const auto checks = status.checks();
  const auto it = std::find_if(checks.begin(), checks.end(),
                               [](const auto& c) { return c.name == "kubelet-shutdown"; });
  ASSERT_NE(it, checks.end());
  EXPECT_EQ(it->detail, full) << full.size() << " bytes";
}

TEST(KubeletOutlook, KubeletsFilesAreReadWithTheFlagNamedInEachFailure) {
  test::temp_dir dir;
  const std::filesystem::path d = dir.path();
  const auto none = read_kubelet_files("", "", d);
  EXPECT_TRUE(none.config.ok());
  EXPECT_TRUE(none.manifest.ok());
  EXPECT_FALSE(none.dropin_usec);
  std::ofstream(d / "config.yaml") << "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n";
  const auto read =
      read_kubelet_files((d / "config.yaml").string(), (d / "missing.yaml").string(), d);
  ASSERT_TRUE(read.config.ok());
  EXPECT_EQ(read.config.value().grace_period, 30s);
  ASSERT_FALSE(read.manifest.ok());
  EXPECT_THAT(read.manifest.error(),
              testing::StartsWith("--static-pod-manifest=" + (d / "missing.yaml").string() + ": "));
}

}  // namespace
}  // namespace shim
