#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "util/process_identity.hpp"
#include "util/result.hpp"

namespace shim {

// What a shim signalled, and the shutdown it did it for.
struct shutdown_record {
  struct signalled_process {
    process_identity process;
    std::int64_t signalled_us = 0;  // CLOCK_MONOTONIC
    int signal = 0;
    // kubelet's graceful node shutdown sends this one its signal: the shim counted it and sent
    // none, and sends its own only if kubelet's lock goes first (then this becomes false).
    bool left_to_kubelet = false;
  };
  std::string boot_id;                     // the record is void in any other boot
  std::optional<std::int64_t> unready_us;  // CLOCK_MONOTONIC; set while a shutdown runs
  std::string cause;
  std::vector<signalled_process> signalled;

  // Had the signal, or has it coming from kubelet: never the shim's target again in this shutdown
  // (but for the one signal it still owes a process left to kubelet).
  bool was_signalled(const process_identity& p) const;
  signalled_process* find(const process_identity& p);
};

// The record kept in the shim's state directory (a systemd RuntimeDirectory= under /run, gone at
// reboot), so that a restarted shim (crash, OOM, SIGKILL, Restart=on-failure) never signals the
// same process twice and can resume the hold with the drain time that is left. Written atomically
// (temporary file, rename) before each signal is sent: a crash in between loses a signal rather
// than sending two, because a second SIGTERM makes kube-apiserver exit at once. A process left to
// kubelet is a line of its own kind ("left_to_kubelet=", the same fields as "signalled=").
class signal_record {
 public:
  // dir empty: nothing is kept.
  explicit signal_record(std::filesystem::path dir);

  bool enabled() const { return !file_.empty(); }
  const std::filesystem::path& file() const { return file_; }

  // The record as the last run left it: empty when there is none, or it is from another boot.
  // An error when it exists but cannot be trusted (a directory others may write to, a malformed
  // file): the caller goes on without it and says so.
  result<shutdown_record> load() const;
  // Replaces the record, leaving out processes that have exited.
  result<> save(const shutdown_record& record) const;

 private:
  std::filesystem::path dir_;
  std::filesystem::path file_;
};

}  // namespace shim
