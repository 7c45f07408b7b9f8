#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kubelet/kubelet_shutdown.hpp"
#include "log_test_support.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::HasSubstr;

kubelet_shutdown_config config_ok(std::string_view text) {
  auto r = parse_kubelet_config(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : kubelet_shutdown_config{};
}

static_pod_priority manifest_ok(std::string_view text) {
  auto r = parse_static_pod_manifest(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
  return r.ok() ? r.value() : static_pod_priority{};
}

std::string config_error(std::string_view text) {
  auto r = parse_kubelet_config(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  return r.ok() ? "" : r.error();
}

std::string manifest_error(std::string_view text) {
  auto r = parse_static_pod_manifest(text);
  EXPECT_FALSE(r.ok()) << "parsed: " << text;
  return r.ok() ? "" : r.error();
}

// An older kubeadm's kube-apiserver manifest, trimmed: no `priority`, only the class name.
constexpr std::string_view kKubeadmApiserver = R"(apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-apiserver
    tier: control-plane
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --shutdown-delay-duration=70s
    image: registry.k8s.io/kube-apiserver:v1.35.0
    name: kube-apiserver
  hostNetwork: true
  priorityClassName: system-node-critical
)";

// kube-apiserver's manifest as kubeadm v1.31 writes it to /etc/kubernetes/manifests, trimmed to
// the fields around the ones read: `priority` next to the class name, no
// terminationGracePeriodSeconds (the API's 30 s), an empty status.
constexpr std::string_view kKubeadm131Apiserver = R"(apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 192.0.2.10:6443
  creationTimestamp: null
  labels:
    component: kube-apiserver
    tier: control-plane
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=192.0.2.10
    image: registry.k8s.io/kube-apiserver:v1.31.2
    imagePullPolicy: IfNotPresent
    name: kube-apiserver
    resources:
      requests:
        cpu: 250m
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
status: {}
)";

// The usual GNS settings (EKS, typhoon): 30 s, of which 10 s for critical pods.
constexpr std::string_view kTypicalConfig = R"(apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
)";

TEST(KubeletShutdown, StaticPodWithoutPriorityStopsFirstAtZero) {
  const auto pod = manifest_ok(kKubeadmApiserver);
  EXPECT_FALSE(pod.priority);
  EXPECT_EQ(pod.priority_class_name, "system-node-critical");
  const auto plan = plan_kubelet_stop(config_ok(kTypicalConfig), pod);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->pod_priority, 0);
  EXPECT_EQ(plan->group_index, 0u);
  EXPECT_TRUE(plan->stops_at_start());
  EXPECT_EQ(plan->sigterm_latest, 0s);
  // The normal pods' 20 s, not the critical pods' 10 s: kubelet counts it as a normal pod.
  EXPECT_EQ(plan->grace, 20s);
  EXPECT_EQ(plan->sigkill_latest(), 20s);
  EXPECT_EQ(plan->period_requested, 30s);
  EXPECT_EQ(plan->describe(),
            "kubelet's SIGTERM reaches kube-apiserver at +0s and its SIGKILL at +20s (pod priority "
            "0, group 1 of 2: priority 0, 20 seconds)");
}

// Issue 19: today's kubeadm puts kube-apiserver in kubelet's critical group, as OpenShift does.
TEST(KubeletShutdown, KubeadmsCurrentManifestIsInTheCriticalGroup) {
  const auto pod = manifest_ok(kKubeadm131Apiserver);
  EXPECT_EQ(pod.priority, kSystemNodeCriticalPriority);
  EXPECT_EQ(pod.namespace_name, "kube-system");
  EXPECT_FALSE(pod.rendered_by_operator());
  EXPECT_FALSE(pod.termination_grace_seconds);
  const auto plan = plan_kubelet_stop(config_ok(kTypicalConfig), pod);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->group_index, 1u);
  EXPECT_FALSE(plan->by_pod_priority);
  EXPECT_EQ(plan->sigterm_latest, 20s);
  EXPECT_EQ(plan->pod_grace, 30s) << "the API's default";
  EXPECT_EQ(plan->grace, 10s);
  EXPECT_TRUE(plan->group_cuts_pod_grace());
  EXPECT_EQ(plan->describe(),
            "kubelet's SIGTERM reaches kube-apiserver at +0s..+20s and its SIGKILL at +10s..+30s "
            "(pod priority 2000001000, group 2 of 2: priority 2000000000, 10 seconds)");
}

TEST(KubeletShutdown, OpenShiftsManifestIsTheOperators) {
  const auto pod = manifest_ok(R"(apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: openshift-kube-apiserver
spec:
  priority: 2000001000
  priorityClassName: system-node-critical
  terminationGracePeriodSeconds: 135
)");
  EXPECT_TRUE(pod.rendered_by_operator());
  EXPECT_EQ(pod.termination_grace_seconds, 135);
  EXPECT_FALSE(manifest_ok("kind: Pod\nspec: {}\n").rendered_by_operator());
  EXPECT_THAT(manifest_error("kind: Pod\nmetadata:\n  namespace: [a]\nspec: {}\n"),
              HasSubstr("metadata.namespace: must be a name"));
}

TEST(KubeletShutdown, MigratedConfigGivesCriticalPodsTheirPeriodLast) {
  const auto c = config_ok(kTypicalConfig);
  EXPECT_EQ(c.groups(),
            (std::vector<kubelet_priority_group>{{0, 20}, {kSystemCriticalPriority, 10}}));
  // An explicit priority above system-critical: the last group, after the normal pods' 20 s at
  // most, and killed after the critical pods' 10 s (issue 13's "kills it at +10 s" of a 70 s
  // drain).
  static_pod_priority pod;
  pod.priority = kSystemNodeCriticalPriority;
  const auto plan = plan_kubelet_stop(c, pod);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->group_index, 1u);
  EXPECT_FALSE(plan->stops_at_start());
  EXPECT_EQ(plan->sigterm_earliest, 0s);
  EXPECT_EQ(plan->sigterm_latest, 20s);
  EXPECT_EQ(plan->grace, 10s);
  EXPECT_EQ(plan->sigkill_earliest(), 10s);
  EXPECT_EQ(plan->sigkill_latest(), 30s);
  EXPECT_THAT(plan->describe(), HasSubstr("at +0s..+20s and its SIGKILL at +10s..+30s"));
}

// The documented fix: a `priority` in the manifest, a group of its own at least as long as the
// drain, and a terminationGracePeriodSeconds as long (else the API's 30 s default cuts it).
TEST(KubeletShutdown, PriorityFixPutsTheApiserverInItsOwnLastGroup) {
  const auto c = config_ok(R"(kind: KubeletConfiguration
shutdownGracePeriodByPodPriority:
- priority: 2000001000
  shutdownGracePeriodSeconds: 90
- priority: 0
  shutdownGracePeriodSeconds: 10
- priority: 2000000000
  shutdownGracePeriodSeconds: 10
)");
  EXPECT_EQ(c.groups(),
            (std::vector<kubelet_priority_group>{
                {0, 10}, {kSystemCriticalPriority, 10}, {kSystemNodeCriticalPriority, 90}}));
  auto pod = manifest_ok(std::string(kKubeadmApiserver) +
                         "  priority: 2000001000\n  terminationGracePeriodSeconds: 90\n");
  auto plan = plan_kubelet_stop(c, pod);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->group_index, 2u);
  EXPECT_EQ(plan->sigterm_latest, 20s);
  EXPECT_EQ(plan->grace, 90s);
  EXPECT_TRUE(plan->by_pod_priority);
  EXPECT_FALSE(plan->group_cuts_pod_grace());
  EXPECT_EQ(plan->period_requested, 110s);

  pod.termination_grace_seconds.reset();
  plan = plan_kubelet_stop(c, pod);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->grace, 30s) << "without terminationGracePeriodSeconds the default 30 s wins";
  EXPECT_THAT(plan->describe(), HasSubstr("cut to the pod's 30s"));
}

TEST(KubeletShutdown, GroupByPriorityPicksTheHighestGroupNotAbove) {
  kubelet_shutdown_config c;
  c.by_pod_priority = {{100, 1}, {200, 2}, {300, 3}};
  const auto index_of = [&](std::int32_t priority) {
    static_pod_priority pod;
    pod.priority = priority;
    return plan_kubelet_stop(c, pod)->group_index;
  };
  EXPECT_EQ(index_of(-5), 0u) << "below every group: the lowest";
  EXPECT_EQ(index_of(100), 0u);
  EXPECT_EQ(index_of(150), 0u) << "between two groups: the lower";
  EXPECT_EQ(index_of(200), 1u);
  EXPECT_EQ(index_of(299), 1u);
  EXPECT_EQ(index_of(300), 2u);
  EXPECT_EQ(index_of(2'000'001'000), 2u) << "above every group: the highest";
  static_pod_priority none;
  EXPECT_EQ(plan_kubelet_stop(c, none)->group_index, 0u) << "no priority is priority 0";

  // Groups of equal priority (found by the fuzzer): sort.Search picks the first of them for a pod
  // of that priority, and the last of them for a pod above it.
  c.by_pod_priority = {{5, 1}, {5, 2}, {10, 3}};
  EXPECT_EQ(index_of(5), 0u);
  EXPECT_EQ(index_of(7), 1u);
}

TEST(KubeletShutdown, ByPodPriorityWinsOverTheTwoPeriods) {
  const auto c = config_ok(R"(shutdownGracePeriod: 30s
shutdownGracePeriodCriticalPods: 10s
shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]
)");
  EXPECT_EQ(c.groups(), (std::vector<kubelet_priority_group>{{0, 5}}));
}

TEST(KubeletShutdown, GnsOffOrMigratedAsKubeletDoes) {
  EXPECT_FALSE(plan_kubelet_stop(config_ok("kind: KubeletConfiguration\n"), {}));
  EXPECT_FALSE(plan_kubelet_stop(config_ok("shutdownGracePeriod: 0s\n"), {}));
  // Critical pods' period longer than the whole: migrateConfig gives nothing, GNS is off.
  EXPECT_FALSE(plan_kubelet_stop(
      config_ok("shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n"), {}));
  // Whole seconds, truncated as Go's Duration / Second.
  EXPECT_EQ(
      config_ok("shutdownGracePeriod: 1500ms\nshutdownGracePeriodCriticalPods: 500ms\n").groups(),
      (std::vector<kubelet_priority_group>{{0, 1}, {kSystemCriticalPriority, 0}}));
  // No critical-pods period: every pod gets the whole period, critical ones nothing.
  EXPECT_EQ(config_ok("shutdownGracePeriod: 45s\n").groups(),
            (std::vector<kubelet_priority_group>{{0, 45}, {kSystemCriticalPriority, 0}}));
}

TEST(KubeletShutdown, ReadsEksStyleJson) {
  const auto c = config_ok(R"({
  "kind": "KubeletConfiguration",
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "shutdownGracePeriod": "45s",
  "shutdownGracePeriodCriticalPods": "15s"
})");
  EXPECT_EQ(c.grace_period, 45s);
  EXPECT_EQ(c.critical_pods_period, 15s);
  const auto pod = manifest_ok(R"({"kind": "Pod", "spec": {"priority": 7}})");
  EXPECT_EQ(pod.priority, 7);
}

TEST(KubeletShutdown, RefusesValuesKubeletWouldNotTakeOrWeDoNotBound) {
  EXPECT_THAT(config_error("shutdownGracePeriod: 30\n"), HasSubstr("shutdownGracePeriod: '30'"));
  EXPECT_THAT(config_error("shutdownGracePeriod: -5s\n"), HasSubstr("shutdownGracePeriod"));
  EXPECT_THAT(config_error("shutdownGracePeriod: 25h\n"), HasSubstr("longer than 24h"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- priority: \"5\"\n"),
              HasSubstr("shutdownGracePeriodByPodPriority[0].priority: must be a number"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- priority: 2147483648\n"),
              HasSubstr("not within"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- shutdownGracePeriodSeconds: -1\n"),
              HasSubstr("not within [0, 86400]"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- priority: 1e3\n"),
              HasSubstr("not a whole number"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- priority: 010\n"),
              HasSubstr("'010' has a leading zero"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority: 5\n"), HasSubstr("must be a list"));
  EXPECT_THAT(config_error("shutdownGracePeriodByPodPriority:\n- 5\n"),
              HasSubstr("must be {priority, shutdownGracePeriodSeconds}"));
  std::string many = "shutdownGracePeriodByPodPriority:\n";
  for (std::size_t i = 0; i <= kMaxKubeletPriorityGroups; ++i) {
    many += "- priority: " + std::to_string(i) + "\n";
  }
  EXPECT_THAT(config_error(many), HasSubstr("more than 64"));
  EXPECT_THAT(config_error("kind: Pod\n"), HasSubstr("not KubeletConfiguration"));
  // libyaml names the line where the stream ends, the second.
  EXPECT_THAT(config_error("a: [\n"), HasSubstr("kubelet config: line 2"));

  EXPECT_THAT(manifest_error("kind: Deployment\nspec: {}\n"), HasSubstr("kind is not Pod"));
  EXPECT_THAT(manifest_error("kind: Pod\n"), HasSubstr("no spec"));
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priority: high\n"),
              HasSubstr("spec.priority: 'high' is not a whole number"));
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  terminationGracePeriodSeconds: 86401\n"),
              HasSubstr("not within [0, 86400]"));
}

// Every line break of YAML 1.1, which kubelet's go-yaml reads (issue 18, item 3): CR, CRLF, NEL,
// LS and PS. The text after one is a line of its own, never part of the value before it.
constexpr std::string_view kYamlLineBreaks[] = {"\r", "\r\n", "\xc2\x85", "\xe2\x80\xa8",
                                                "\xe2\x80\xa9"};

std::string join_lines(std::initializer_list<std::string_view> lines, std::string_view br) {
  std::string s;
  for (const auto l : lines) {
    s += l;
    s += br;
  }
  return s;
}

TEST(KubeletShutdown, ManifestPriorityAfterEveryYamlLineBreak) {
  for (const auto br : kYamlLineBreaks) {
    SCOPED_TRACE(testing::PrintToString(std::string(br)));
    // The whole manifest in that break.
    auto pod =
        manifest_ok(join_lines({"apiVersion: v1", "kind: Pod", "spec:", "  containers: []",
                                "  priority: 2000001000", "  terminationGracePeriodSeconds: 90"},
                               br));
    EXPECT_EQ(pod.priority, kSystemNodeCriticalPriority);
    EXPECT_EQ(pod.termination_grace_seconds, 90);
    // kubeadm's manifest, LF throughout, with one such break before the priority: the failure
    // this project exists to prevent (the priority lost, kubelet thought to stop it at +0).
    pod = manifest_ok(std::string(kKubeadmApiserver.substr(0, kKubeadmApiserver.size() - 1)) +
                      std::string(br) + "  priority: 2000001000\n");
    EXPECT_EQ(pod.priority, kSystemNodeCriticalPriority);
    EXPECT_EQ(pod.priority_class_name, "system-node-critical");
    const auto plan = plan_kubelet_stop(config_ok(kTypicalConfig), pod);
    ASSERT_TRUE(plan);
    EXPECT_FALSE(plan->stops_at_start());
  }
}

TEST(KubeletShutdown, ConfigDurationsAndGroupsAfterEveryYamlLineBreak) {
  for (const auto br : kYamlLineBreaks) {
    SCOPED_TRACE(testing::PrintToString(std::string(br)));
    auto c = config_ok(
        join_lines({"apiVersion: kubelet.config.k8s.io/v1beta1", "kind: KubeletConfiguration",
                    "shutdownGracePeriod: 30s", "shutdownGracePeriodCriticalPods: 10s"},
                   br));
    EXPECT_EQ(c.grace_period, 30s);
    EXPECT_EQ(c.critical_pods_period, 10s);
    // One odd break in a file of LF lines, after the period and inside the list.
    c = config_ok(
        "kind: KubeletConfiguration\nshutdownGracePeriod: 45s" + std::string(br) +
        "shutdownGracePeriodByPodPriority:\n- priority: 0\n  shutdownGracePeriodSeconds: 5" +
        std::string(br) + "- priority: 2000001000" + std::string(br) +
        "  shutdownGracePeriodSeconds: 40\n");
    EXPECT_EQ(c.grace_period, 45s);
    EXPECT_EQ(c.by_pod_priority,
              (std::vector<kubelet_priority_group>{{0, 5}, {kSystemNodeCriticalPriority, 40}}));
  }
}

// A plain scalar that YAML 1.1 reads as null (go-yaml v2's resolve(): "", "~", "null", "Null",
// "NULL") leaves a field as kubelet's decoding leaves it: unset, or Go's zero.
TEST(KubeletShutdown, EveryYamlNullLeavesTheDefault) {
  for (const std::string null : {"", "~", "null", "Null", "NULL"}) {
    SCOPED_TRACE(null);
    const auto pod =
        manifest_ok("kind: Pod\nspec:\n  priority: " + null + "\n  priorityClassName: " + null +
                    "\n  terminationGracePeriodSeconds: " + null + "\n");
    EXPECT_FALSE(pod.priority);
    EXPECT_EQ(pod.priority_class_name, "");
    EXPECT_FALSE(pod.termination_grace_seconds);
    EXPECT_TRUE(
        config_ok("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority: " + null + "\n")
            .by_pod_priority.empty());
    EXPECT_EQ(
        config_ok("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority:\n- priority: " +
                  null + "\n  shutdownGracePeriodSeconds: " + null + "\n")
            .by_pod_priority,
        (std::vector<kubelet_priority_group>{{0, 0}}));
    // A null item of the list: Go's JSON decoding leaves that element a zero group.
    EXPECT_EQ(config_ok("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority:\n- " + null +
                        "\n- priority: 5\n  shutdownGracePeriodSeconds: 3\n")
                  .by_pod_priority,
              (std::vector<kubelet_priority_group>{{0, 0}, {5, 3}}));
    // A metav1.Duration's UnmarshalJSON is called for null too and refuses "": kubelet does not
    // start with it, so the shim does not read it as 0 either.
    EXPECT_THAT(config_error("kind: KubeletConfiguration\nshutdownGracePeriod: " + null + "\n"),
                HasSubstr("shutdownGracePeriod: null"));
    EXPECT_THAT(
        config_error("kind: KubeletConfiguration\nshutdownGracePeriodCriticalPods: " + null + "\n"),
        HasSubstr("shutdownGracePeriodCriticalPods: null"));
  }
  // Quoted, they are strings: no number.
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priority: \"null\"\n"),
              HasSubstr("spec.priority: must be a number"));
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priority: '~'\n"),
              HasSubstr("spec.priority: must be a number"));
}

// Numbers that go-yaml reads as YAML 1.1 does (hex, octal, a sign, underscores, floats that
// kubelet's JSON step turns into integers): refused, never read as something else.
TEST(KubeletShutdown, RefusesNumbersKubeletReadsOtherThanAsDecimalDigits) {
  for (const std::string n : {"0x10", "0X10", "010", "0o10", "+5", "1_000", "0b101", "-0b1", "30.0",
                              "1e3", "2000001000.0", ".5", "1:30"}) {
    SCOPED_TRACE(n);
    EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priority: " + n + "\n"),
                HasSubstr("spec.priority: '" + n + "'"));
    EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  terminationGracePeriodSeconds: " + n + "\n"),
                HasSubstr("spec.terminationGracePeriodSeconds: '" + n + "'"));
    EXPECT_THAT(config_error("kind: KubeletConfiguration\nshutdownGracePeriodByPodPriority:\n"
                             "- shutdownGracePeriodSeconds: " +
                             n + "\n"),
                HasSubstr("shutdownGracePeriodSeconds: '" + n + "'"));
  }
  // Infinity and NaN have no JSON form: kubelet's YAML-to-JSON step refuses the whole file.
  for (const std::string n : {".inf", "-.Inf", ".nan"}) {
    EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priority: " + n + "\n"),
                HasSubstr("'" + n + "' has no JSON form"));
  }
  // What stays: plain decimal digits, with a minus sign where the field may be negative.
  EXPECT_EQ(manifest_ok("kind: Pod\nspec:\n  priority: -5\n").priority, -5);
  EXPECT_EQ(manifest_ok("kind: Pod\nspec:\n  priority: -0\n").priority, 0);
  EXPECT_EQ(manifest_ok("kind: Pod\nspec:\n  priority: 0\n").priority, 0);
}

// What kubelet refuses, the shim does not read: a string field that YAML reads as another type, a
// duration that is not a string, YAML that sigs.k8s.io/yaml cannot turn into JSON.
TEST(KubeletShutdown, RefusesWhatKubeletRefuses) {
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priorityClassName: 5\n"),
              HasSubstr("spec.priorityClassName: '5' is not a string"));
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priorityClassName: yes\n"),
              HasSubstr("spec.priorityClassName: 'yes' is not a string"));
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priorityClassName: [a]\n"),
              HasSubstr("spec.priorityClassName: must be a name"));
  EXPECT_THAT(config_error("kind: KubeletConfiguration\nshutdownGracePeriod: 0\n"),
              HasSubstr("shutdownGracePeriod: '0' is not a string"));
  EXPECT_THAT(config_error("kind: KubeletConfiguration\nshutdownGracePeriod: true\n"),
              HasSubstr("shutdownGracePeriod: 'true' is not a string"));
  // Quoted or in a block scalar, a duration is a string.
  EXPECT_EQ(config_ok("kind: KubeletConfiguration\nshutdownGracePeriod: \"0\"\n").grace_period, 0s);
  EXPECT_EQ(config_ok("kind: KubeletConfiguration\nshutdownGracePeriod: >-\n  30s\n").grace_period,
            30s);
  EXPECT_EQ(manifest_ok("kind: Pod\nspec:\n  priorityClassName: |-\n    system-node-critical\n")
                .priority_class_name,
            "system-node-critical");
  EXPECT_THAT(config_error("kind: KubeletConfiguration\nshutdownGracePeriod: |\n  30s\n"),
              HasSubstr("shutdownGracePeriod"));  // "30s\n": Go's ParseDuration refuses it too
  // .inf and .nan anywhere: encoding/json cannot write them, so kubelet reads nothing.
  EXPECT_THAT(manifest_error("kind: Pod\nmetadata:\n  annotations:\n    a: .inf\nspec:\n"
                             "  priority: 5\n"),
              HasSubstr("line 4"));
  // A key that is null: sigs.k8s.io/yaml refuses the file.
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  ~: 1\n  priority: 5\n"), HasSubstr("line 3"));
  // A merge key would bring in values the shim does not follow.
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  <<: {priority: 5}\n"), HasSubstr("merge"));
  // go-yaml v2 knows no "\/" escape (JSON's): it refuses the file.
  EXPECT_THAT(manifest_error("kind: Pod\nspec:\n  priorityClassName: \"a\\/b\"\n  priority: 5\n"),
              HasSubstr("\\/"));
}

// kubelet reads a file whose first non-blank character is '{' as JSON (apimachinery's
// hasJSONPrefix), with Go's encoding/json: YAML that starts so is refused, as kubelet refuses it.
TEST(KubeletShutdown, ReadsJsonAsJsonOnly) {
  const auto pod =
      manifest_ok(R"({"kind":"Pod","spec":{"priority":7,"priorityClassName":"a\/b"}})");
  EXPECT_EQ(pod.priority, 7);
  EXPECT_EQ(pod.priority_class_name, "a/b");
  EXPECT_EQ(
      manifest_ok("\r\n\t {\"kind\": \"Pod\",\r\n\t\"spec\": {\"priority\": 8}}\r\n").priority, 8);
  EXPECT_THAT(manifest_error("{kind: Pod, spec: {priority: 5}}\n"), HasSubstr("JSON"));
  EXPECT_THAT(manifest_error("{\"kind\": \"Pod\", # a comment\n\"spec\": {\"priority\": 5}}\n"),
              HasSubstr("JSON"));
  EXPECT_THAT(manifest_error("{\"kind\": \"Pod\", \"spec\": {\"priority\": 5},}"),
              HasSubstr("JSON"));
  EXPECT_THAT(manifest_error("{\"kind\": \"Pod\", \"spec\": {\"priority\": 5}} x"),
              HasSubstr("JSON"));
  EXPECT_THAT(manifest_error("{\"kind\": \"Pod\", \"spec\": {\"priority\": 5.0}}"),
              HasSubstr("spec.priority: '5.0'"));
  EXPECT_THAT(manifest_error("{\"kind\": \"Pod\", \"spec\": {\"priority\": \"5\"}}"),
              HasSubstr("spec.priority: must be a number"));
  // YAML before the brace (a comment, a document marker) makes it YAML again.
  EXPECT_EQ(manifest_ok("# kube-apiserver\n{kind: Pod, spec: {priority: 5}}\n").priority, 5);
  EXPECT_THAT(config_error(R"({"kind": "KubeletConfiguration", "shutdownGracePeriod": null})"),
              HasSubstr("shutdownGracePeriod: null"));
}

// Issue 32: kube-apiserver's container's command, for its shutdown delay (kubeadm's layout).
TEST(KubeletShutdown, TheManifestsContainerCommandIsRead) {
  const auto pod = parse_static_pod_manifest(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    component: kube-apiserver\n"
      "  name: kube-apiserver\n  namespace: kube-system\nspec:\n  containers:\n"
      "  - name: sidecar\n    command: [\"shutdown-shim\"]\n"
      "  - command:\n    - kube-apiserver\n    - --advertise-address=10.0.0.1\n"
      "    args: [\"--shutdown-delay-duration=70s\"]\n    name: kube-apiserver\n"
      "  priority: 2000001000\n");
  ASSERT_TRUE(pod) << pod.error();
  EXPECT_EQ(pod.value().component, "kube-apiserver");
  EXPECT_TRUE(pod.value().is("kube-apiserver"));
  EXPECT_FALSE(pod.value().is("etcd"));
  EXPECT_EQ(pod.value().command,
            (std::vector<std::string>{"kube-apiserver", "--advertise-address=10.0.0.1",
                                      "--shutdown-delay-duration=70s"}));
  const auto bad = parse_static_pod_manifest(
      "kind: Pod\nspec:\n  containers:\n  - name: x\n    command: kube-apiserver\n");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error(), testing::HasSubstr("spec.containers[].command: must be a list"));
}

// Issue 32: --static-pod-manifest naming kubelet's directory reads every pod in it, as kubelet
// does: kube-apiserver's and etcd's (OpenShift names them by the pod, kubeadm by its label).
TEST(KubeletShutdown, KubeletsStaticPodDirectoryGivesKubeApiserverAndEtcd) {
  test::temp_dir dir;
  const std::filesystem::path d = dir.path();
  std::ofstream(d / "etcd-pod.yaml")
      << "kind: Pod\nmetadata:\n  name: etcd\n  namespace: openshift-etcd\nspec:\n"
         "  priority: 2000001000\n";
  std::ofstream(d / "kube-apiserver-pod.yaml")
      << "kind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: "
         "openshift-kube-apiserver\nspec:\n  priority: 2000001000\n";
  std::ofstream(d / "haproxy.yaml") << "kind: Pod\nmetadata:\n  name: haproxy\nspec: {}\n";
  std::ofstream(d / "broken.yaml") << "kind: [\n";
  std::ofstream(d / ".kube-apiserver.yaml.swp") << "not a pod";
  const auto read = read_kubelet_files("", d.string(), d);
  ASSERT_TRUE(read.manifest) << read.manifest.error();
  EXPECT_EQ(read.manifest.value().name, "kube-apiserver");
  ASSERT_TRUE(read.etcd);
  EXPECT_EQ(read.etcd->name, "etcd");

  test::temp_dir empty;
  std::ofstream(std::filesystem::path(empty.path()) / "etcd.yaml")
      << "kind: Pod\nmetadata:\n  name: etcd\nspec: {}\n";
  const auto none = read_kubelet_files("", empty.path(), empty.path());
  ASSERT_FALSE(none.manifest);
  EXPECT_THAT(none.manifest.error(), testing::HasSubstr("no kube-apiserver pod among 1 files"));
}

TEST(KubeletShutdown, RecognisesKubeletsLockOnly) {
  constexpr std::string_view kWhy = "Kubelet needs time to handle node shutdown";
  EXPECT_TRUE(is_kubelet_inhibitor("shutdown", "kubelet", kWhy, "delay", 0));
  EXPECT_TRUE(is_kubelet_inhibitor("sleep:shutdown", "kubelet", kWhy, "delay", 0));
  EXPECT_FALSE(is_kubelet_inhibitor("shutdown", "kubelet", kWhy, "block", 0));
  EXPECT_FALSE(is_kubelet_inhibitor("sleep", "kubelet", kWhy, "delay", 0));
  EXPECT_FALSE(is_kubelet_inhibitor("shutdownx", "kubelet", kWhy, "delay", 0));
  EXPECT_FALSE(is_kubelet_inhibitor("shutdown", "shutdown-shim", kWhy, "delay", 0));
  EXPECT_FALSE(is_kubelet_inhibitor("shutdown", "kubelet", "something else", "delay", 0));
  // Only root's: another user's lock in kubelet's words is not kubelet's.
  EXPECT_FALSE(is_kubelet_inhibitor("shutdown", "kubelet", kWhy, "delay", 65534));
}

}  // namespace
}  // namespace shim
