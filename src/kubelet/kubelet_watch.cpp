#include "kubelet/kubelet_watch.hpp"

#include <cstdint>
#include <optional>

#include "kubelet/kubelet_shutdown.hpp"

namespace shim {

void kubelet_watch::start() {
  if (cfg_.kubelet_config.empty() && cfg_.static_pod_manifest.empty()) return;
  read_files();
  // With logind, what kubelet does turns on its lock: said once the locks are listed, not once
  // before (without a lock) and again after.
  if (cfg_.inhibit == inhibit_mode::off) said();
}

void kubelet_watch::read_files() {
  const auto files =
      read_kubelet_files(cfg_.kubelet_config, cfg_.static_pod_manifest, cfg_.logind_conf_dir);
  outlook_.set_files(files.config, files.manifest, files.dropin_usec);
}

void kubelet_watch::locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) {
  std::optional<std::uint32_t> kubelet;
  for (const auto& l : locks) {
    if (is_kubelet_inhibitor(l.what, l.who, l.why, l.mode, l.uid)) kubelet = l.pid;
  }
  const bool first = !listed_;
  listed_ = true;
  if (kubelet == outlook_.lock_pid()) {
    if (first) said();
    return;
  }
  const bool gone = outlook_.lock_pid().has_value();
  if (kubelet) read_files();
  outlook_.set_lock(kubelet);
  // First: if the hold counted on kubelet's signal, the shim's is due at once.
  if (gone) on_.gone();
  said();
}

// Said once per change: at start, and when kubelet's lock or files change what is expected.
void kubelet_watch::said() {
  if (!outlook_.applies()) return;
  const std::string summary = outlook_.summary();
  if (summary == said_) return;
  said_ = summary;
  // A problem is said in full, with its fix; the normal case in a few words (the event log's
  // KubeletShutdown record keeps the summary in full).
  if (auto warning = outlook_.warning()) {
    log_.warning(*warning);
  } else {
    log_.notice(outlook_.headline());
  }
  on_.changed();
}

}  // namespace shim
