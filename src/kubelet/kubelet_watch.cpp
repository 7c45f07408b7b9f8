#include "kubelet/kubelet_watch.hpp"

#include <unistd.h>

#include <algorithm>

#include "kubelet/kubelet_shutdown.hpp"

namespace shim {

void kubelet_watch::start() {
  if (cfg_.kubelet_config.empty() && cfg_.static_pod_manifest.empty()) return;
  read_files();
  // With logind, what kubelet does turns on its lock: said once the locks are listed, not once
  // before (without a lock) and again after.
  if (!cfg_.bus) said();
}

void kubelet_watch::read_files() {
  const auto files =
      read_kubelet_files(cfg_.kubelet_config, cfg_.static_pod_manifest, cfg_.logind_conf_dir);
  outlook_.set_files(files.config, files.manifest, files.dropin_usec, files.etcd);
}

void kubelet_watch::locks_listed(const std::vector<logind_inhibitor::listed_lock>& locks) {
  std::optional<std::uint32_t> kubelet;
  for (const auto& l : locks) {
    if (is_kubelet_inhibitor(l.what, l.who, l.why, l.mode, l.uid)) kubelet = l.pid;
  }
  // logind's PIDs are the shim's own only when its own lock is listed with its own PID.
  const auto self = static_cast<std::uint32_t>(::getpid());
  const bool same_pids =
      std::any_of(locks.begin(), locks.end(), [self](const auto& l) { return l.pid == self; });
  const bool first = !listed_;
  listed_ = true;
  if (kubelet == outlook_.lock_pid()) {
    // The shim's own lock listed only now (it was retrying): kubelet can be followed from now on.
    if (kubelet && same_pids && !process_) watch_process(*kubelet);
    if (first) said();
    return;
  }
  const bool lost = outlook_.lock_pid().has_value() && !kubelet;
  if (kubelet) {
    read_files();
    outlook_.set_lockless(std::nullopt);
    if (same_pids) watch_process(*kubelet);
  }
  outlook_.set_lock(kubelet);
  if (lost) {
    if (process_ && identify_process(process_->pid) == process_) {
      // kubelet closed it itself and runs on: it still stops its pods at a shutdown.
      outlook_.set_lockless(static_cast<std::uint32_t>(process_->pid));
    } else {
      process_.reset();
      // First: if the hold counted on kubelet's signal, the shim's may be due at once.
      on_.kubelet_gone();
    }
  }
  said();
}

void kubelet_watch::watch_process(std::uint32_t pid) {
  const auto p = static_cast<pid_t>(pid);
  if (process_ && process_->pid == p) return;
  watcher_.clear();
  process_.reset();
  auto opened = process_handle::open(p);
  const auto identity = identify_process(p);
  if (!opened || !opened.value() || !identity) return;
  process_ = identity;
  if (auto watched =
          watcher_.watch(std::move(*opened.value()), [this](pid_t) { on_process_exit(); });
      !watched) {
    log_.warning("cannot watch kubelet's process", {{"error", watched.error()}});
    process_.reset();
  }
}

void kubelet_watch::on_process_exit() {
  process_.reset();
  // With its lock listed, logind's next list says it went; running on without it, it is gone now.
  if (!outlook_.lockless_pid()) return;
  outlook_.set_lockless(std::nullopt);
  on_.kubelet_gone();
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
  on_.kubelet_changed();
}

}  // namespace shim
