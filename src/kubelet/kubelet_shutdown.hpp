#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.hpp"

namespace shim {

// What kubelet's graceful node shutdown (GNS) will do to kube-apiserver's static pod, worked out
// read-only from kubelet's configuration file and the pod's manifest (issue 13, item 1). Modelled
// on kubelet's source (Kubernetes 1.35's pkg/kubelet/nodeshutdown; the same since 1.24 in every
// point used here, see tests/sandbox/README.md "fake_kubelet"):
//  - the groups: shutdownGracePeriodByPodPriority when it has entries; otherwise migrateConfig():
//    {priority 0: shutdownGracePeriod - shutdownGracePeriodCriticalPods, priority 2000000000
//    (system critical): shutdownGracePeriodCriticalPods}, in whole seconds (Go's integer
//    division), none when shutdownGracePeriod is 0 or shorter than the critical-pods period (GNS
//    off); sorted by priority, lowest first;
//  - a pod's group (groupByPriority): the highest group whose priority is <= the pod's; the lowest
//    group for a pod below every group. A static pod's priority is its manifest's `priority`, or
//    0: `priorityClassName` is resolved by API admission, which static pods never pass
//    (kubernetes#113940, #133442);
//  - the order (killPods): group after group, lowest first; a group with no pods is skipped, and a
//    group's turn ends when its pods are gone or its shutdownGracePeriodSeconds is over;
//  - the pod's grace: the group's seconds, or the pod's terminationGracePeriodSeconds when that is
//    shorter (30 s when the manifest says nothing: tryDecodeSinglePod in pkg/kubelet/config/
//    common.go decodes manifests with the API's defaulting); the runtime's SIGKILL follows when
//    it is over.

// kubelet's delay lock as logind's ListInhibitors shows it (InhibitShutdown() in
// pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go).
inline constexpr std::string_view kKubeletInhibitWho = "kubelet";
inline constexpr std::string_view kKubeletInhibitWhy = "Kubelet needs time to handle node shutdown";

// Whether one ListInhibitors entry (what, who, why, mode, uid) is kubelet's GNS lock: a "delay"
// lock on "shutdown" (logind lists several kinds as "shutdown:sleep") with kubelet's who and why,
// held by root. kubelet runs as root; any user polkit lets take a delay lock could name one
// "kubelet", and a lock taken for kubelet's would make the shim leave the signal to nobody.
bool is_kubelet_inhibitor(std::string_view what, std::string_view who, std::string_view why,
                          std::string_view mode, std::uint32_t uid);

// One group of shutdownGracePeriodByPodPriority.
struct kubelet_priority_group {
  std::int32_t priority = 0;
  std::int64_t grace_seconds = 0;  // shutdownGracePeriodSeconds
  bool operator==(const kubelet_priority_group&) const = default;
};

// kubelet's system-critical priority (scheduling.SystemCriticalPriority), migrateConfig's group.
inline constexpr std::int32_t kSystemCriticalPriority = 2'000'000'000;
// system-node-critical's priority, which a static pod gets only from its manifest's `priority`:
// kubeadm (its v1.31 manifests) and OpenShift's operator write it there next to the class name.
inline constexpr std::int32_t kSystemNodeCriticalPriority = 2'000'001'000;
// The API's default terminationGracePeriodSeconds.
inline constexpr std::int64_t kDefaultTerminationGraceSeconds = 30;

// Bounds on what the files may say. Both files are a few KiB; a grace beyond a day is a typo; and
// 64 groups is more than anyone configures (kubelet's docs show 3 to 6).
inline constexpr std::size_t kMaxKubeletFileBytes = 256 * 1024;
inline constexpr std::int64_t kMaxKubeletGraceSeconds = 24 * 3600;
inline constexpr std::size_t kMaxKubeletPriorityGroups = 64;

// The GNS settings of a KubeletConfiguration.
struct kubelet_shutdown_config {
  std::chrono::nanoseconds grace_period{0};             // shutdownGracePeriod
  std::chrono::nanoseconds critical_pods_period{0};     // shutdownGracePeriodCriticalPods
  std::vector<kubelet_priority_group> by_pod_priority;  // shutdownGracePeriodByPodPriority

  // kubelet's groups, lowest priority first; empty when GNS is off.
  std::vector<kubelet_priority_group> groups() const;
};

// What a static pod's manifest says that matters here.
struct static_pod_priority {
  std::optional<std::int32_t> priority;  // spec.priority
  std::string priority_class_name;       // spec.priorityClassName, ignored by kubelet
  std::optional<std::int64_t> termination_grace_seconds;  // spec.terminationGracePeriodSeconds
  std::string namespace_name;                             // metadata.namespace
  std::string name{};                                     // metadata.name
  std::string component{};                                // metadata.labels.component (kubeadm)
  // The command and args of the container named after the pod's component (kube-apiserver, etcd),
  // or of the first: what kube-apiserver is started with (its shutdown delay, for signal_plan).
  std::vector<std::string> command{};

  // An operator renders the manifest (OpenShift's cluster-kube-apiserver-operator writes it into
  // openshift-kube-apiserver) and rewrites any edit of it: a fix must go elsewhere.
  bool rendered_by_operator() const { return namespace_name.starts_with("openshift-"); }
  // Which pod it is, by kubeadm's label, the pod's name (OpenShift: "kube-apiserver-NODE",
  // "etcd-NODE"), or a container's.
  bool is(std::string_view component_name) const;
  std::vector<std::string> container_names{};
};

// When kubelet stops the pod, relative to PrepareForShutdown. Lower groups with pods take up to
// their whole grace each, and none at all when they have no pods or their pods exit at once: the
// SIGTERM comes between sigterm_earliest (always 0) and sigterm_latest.
struct kubelet_stop_plan {
  std::int32_t pod_priority = 0;  // as kubelet sees it
  std::size_t group_index = 0;    // in groups
  std::vector<kubelet_priority_group> groups;
  // The groups are shutdownGracePeriodByPodPriority's, not migrateConfig's of the two periods.
  bool by_pod_priority = false;
  std::chrono::seconds sigterm_earliest{0};
  std::chrono::seconds sigterm_latest{0};
  std::chrono::seconds grace{0};             // SIGTERM to SIGKILL
  std::chrono::seconds pod_grace{0};         // the pod's terminationGracePeriodSeconds
  std::chrono::seconds period_requested{0};  // all groups: what kubelet asks InhibitDelayMaxSec for

  // kubelet's SIGTERM comes at the very start of the shutdown, whatever else runs on the node.
  bool stops_at_start() const { return sigterm_latest.count() == 0; }
  std::chrono::seconds sigkill_earliest() const { return sigterm_earliest + grace; }
  std::chrono::seconds sigkill_latest() const { return sigterm_latest + grace; }
  // The group's grace is shorter than the pod's own, to which kube-apiserver's shutdown is sized.
  bool group_cuts_pod_grace() const { return grace < pod_grace; }
  // "+0s..+20s", or "+0s" when the window is a moment.
  std::string sigterm_window() const;
  std::string sigkill_window() const;
  // "kubelet's SIGTERM reaches kube-apiserver at +0s..+20s and its SIGKILL at +10s..+30s (pod
  // priority 2000001000, group 2 of 2: priority 2000000000, 10 seconds)".
  std::string describe() const;
};

// nullopt when GNS is off (no groups).
std::optional<kubelet_stop_plan> plan_kubelet_stop(const kubelet_shutdown_config& config,
                                                   const static_pod_priority& pod);

// Parsers of the files' text, read as kubelet reads them: as JSON when the first character after
// Unicode spaces is '{', as YAML otherwise (yaml_document.hpp), then as kubelet's JSON decoding
// takes each field (an int field a JSON integer, a metav1.Duration a string, null the default).
// What kubelet would read otherwise (0x10, 010, +5, 1_000, 30.0: numbers not in decimal digits) or
// refuse is an error, never a value: kubelet_outlook then has the shim signal itself. Errors are
// one line naming the field or the line.
result<kubelet_shutdown_config> parse_kubelet_config(std::string_view text);
result<static_pod_priority> parse_static_pod_manifest(std::string_view text);

// kubelet's drop-in for logind, written when logind's InhibitDelayMaxSec is shorter than kubelet's
// whole shutdown (the sum of its groups' graces): the value it sets there, read from
// conf_dir/99-kubelet.conf; none when there is no such file or it says no value; a failure when it
// cannot be read.
inline constexpr std::string_view kKubeletDropinName = "99-kubelet.conf";
result<std::optional<std::uint64_t>> kubelet_dropin_usec(const std::filesystem::path& conf_dir);

// What the shim reads of kubelet's: --kubelet-config and --static-pod-manifest (a path not given is
// read as empty: a success with nothing in it; a failure names the flag and the file), and
// 99-kubelet.conf in logind_conf_dir. --static-pod-manifest names kube-apiserver's manifest, or
// kubelet's staticPodPath directory: then every pod in it is read as kubelet reads them (files
// whose name starts with '.' are skipped, at most kMaxStaticPodFiles), kube-apiserver's is the
// manifest and etcd's, if there, is etcd (issue 32: kubeadm gives both the same priority, so
// kubelet stops etcd together with kube-apiserver).
inline constexpr std::size_t kMaxStaticPodFiles = 64;
struct kubelet_files {
  result<kubelet_shutdown_config> config;
  result<static_pod_priority> manifest;
  std::optional<static_pod_priority> etcd;
  result<std::optional<std::uint64_t>> dropin_usec;
};
kubelet_files read_kubelet_files(const std::string& config_path, const std::string& manifest_path,
                                 const std::filesystem::path& logind_conf_dir);

}  // namespace shim
