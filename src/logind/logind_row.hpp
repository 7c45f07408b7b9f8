#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shim {

// The logind edge's rows of the status table (the inhibitor and logind-delay checks): written by
// logind_edge alone, read by the table, /metrics and the shutdown's records.
struct logind_row {
  // In the order of logind_row.cpp's kLockWords.
  enum class inhibitor_state {
    disabled,  // --inhibit=off
    pending,   // first attempt not finished yet
    held,      // we hold a delay lock
    retrying,  // not held; retrying with backoff (auto mode or after the bus was lost)
    released,  // released at the end of a shutdown hold
  };

  inhibitor_state inhibitor = inhibitor_state::pending;
  std::string inhibitor_detail;  // why it is not held, when it is not

  // logind's InhibitDelayMaxUSec as last read.
  std::optional<std::uint64_t> delay_max_usec;
  // What --ensure-inhibit-delay did about it ("raised from 5s to 2m29s by ..."); empty when off.
  std::string delay_ensure;

  // The lock in one word for `status`: off, pending, held, retrying or released.
  std::string_view lock_word() const;
  // The inhibitor check's detail: why the lock is not held ("" when it is).
  std::string lock_detail() const;

  // logind would end a hold of `hold` before the shim does.
  bool delay_too_short(std::chrono::nanoseconds hold) const;
  std::optional<std::string> delay_warning(std::chrono::nanoseconds hold) const;
};

}  // namespace shim
