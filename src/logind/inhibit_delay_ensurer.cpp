#include "logind/inhibit_delay_ensurer.hpp"

#include <fmt/format.h>

#include <system_error>

#include "util/atomic_file.hpp"
#include "util/duration_text.hpp"
#include "util/saturating.hpp"

namespace shim {

inhibit_delay_ensurer::inhibit_delay_ensurer(boost::asio::io_context& io, logger& log,
                                             event_recorder& events, const logind_settings& cfg,
                                             bus_calls calls, handlers h)
    : log_(log),
      events_(events),
      mode_(cfg.ensure_inhibit_delay),
      hold_(saturating_add(cfg.drain_delay, cfg.exit_timeout)),
      paths_(logind_conf_paths::for_conf_dir(cfg.logind_conf_dir)),
      calls_(std::move(calls)),
      handlers_(std::move(h)),
      deadline_timer_(io),
      reread_timer_(io) {}

void inhibit_delay_ensurer::start(std::uint64_t current_usec) {
  if (started_) return;
  started_ = true;
  old_usec_ = current_usec;
  const auto planned = plan_inhibit_delay(paths_, hold_);
  // Long enough for the hold is not enough when our own drop-in is what cuts a larger value that
  // another file sets: the vendor copy (150 s) sorts after kubelet's 99-kubelet.conf and would
  // cut kubelet's graceful node shutdown short (system case kubelet-dropin).
  const bool lowers = planned && planned.value().shim_dropin_lowers;
  if (!inhibit_delay_too_short(current_usec, hold_) && !lowers) {
    progress(fmt::format("long enough already ({}); nothing written", describe_usec(current_usec)));
    log_.info(
        "--ensure-inhibit-delay: logind's InhibitDelayMaxSec is long enough already",
        {{"InhibitDelayMaxUSec", std::to_string(current_usec)}, {"hold", format_duration(hold_)}});
    return finish(result<>::success());
  }
  if (!planned) return fail(planned.error());
  plan_ = planned.value();
  try {
    write_file_atomically(paths_.shim_dropin, plan_.file_text);
  } catch (const std::system_error& e) {
    return fail(e.what());
  }
  progress(fmt::format("raising it to {}: wrote {}, reloading logind",
                       describe_usec(plan_.write_usec), paths_.shim_dropin.string()));
  log_.notice("--ensure-inhibit-delay: wrote a logind drop-in; asking PID 1 to reload logind",
              {{"file", paths_.shim_dropin.string()},
               {"InhibitDelayMaxSec", describe_usec(plan_.write_usec)},
               {"was", describe_usec(old_usec_)}});

  // One bound over the reload and every re-read, so that a lost bus (no callback) ends it too.
  deadline_timer_.expires_after(kReloadBound);
  deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    fail(
        fmt::format("logind did not show InhibitDelayMaxUSec >= {} within {} of the reload "
                    "(last read: {})",
                    describe_usec(plan_.effective_usec),
                    format_duration(std::chrono::nanoseconds(kReloadBound)),
                    last_read_ ? describe_usec(*last_read_) : std::string("none")));
  });
  calls_.reload_logind([this](const result<>& reloaded) {
    if (finished_) return;
    if (!reloaded) {
      return fail("KillUnit(systemd-logind.service, all, SIGHUP) failed: " + reloaded.error());
    }
    reread();
  });
}

void inhibit_delay_ensurer::reread() {
  calls_.read_inhibit_delay([this](const result<std::uint64_t>& usec) {
    if (finished_) return;
    if (usec && usec.value() >= plan_.effective_usec) return succeed(usec.value());
    if (usec) last_read_ = usec.value();
    if (!usec) log_.info("re-reading InhibitDelayMaxUSec failed", {{"error", usec.error()}});
    // The reload is asynchronous and announces nothing: ask again, a little later each time.
    reread_timer_.expires_after(reread_backoff_.next());
    reread_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !finished_) reread();
    });
  });
}

void inhibit_delay_ensurer::succeed(std::uint64_t usec) {
  progress(fmt::format("raised from {} to {} by {}", describe_usec(old_usec_), describe_usec(usec),
                       paths_.shim_dropin.string()));
  events_.record(event_kind::InhibitDelayEnsured, "--ensure-inhibit-delay",
                 "raised logind's InhibitDelayMaxSec above drain-delay + exit-timeout",
                 {{"file", paths_.shim_dropin.string()},
                  {"old_usec", std::to_string(old_usec_)},
                  {"new_usec", std::to_string(usec)},
                  {"written", "InhibitDelayMaxSec=" + plan_.write_text}});
  finish(result<>::success());
}

void inhibit_delay_ensurer::fail(const std::string& why) {
  progress("could not raise it: " + why);
  if (mode_ == ensure_mode::best_effort) {
    log_.warning(
        "--ensure-inhibit-delay=try: could not raise logind's InhibitDelayMaxSec; going on",
        {{"error", why}});
  }
  finish(result<>::failure(why));
}

void inhibit_delay_ensurer::finish(const result<>& outcome) {
  finished_ = true;
  reread_timer_.cancel();
  // From the loop, never from inside start() (the convention, util/result.hpp). Setting the
  // deadline timer anew cancels its wait.
  deadline_timer_.expires_after(std::chrono::seconds(0));
  deadline_timer_.async_wait([this, outcome](const boost::system::error_code& ec) {
    if (!ec && handlers_.finished) handlers_.finished(outcome);
  });
}

void inhibit_delay_ensurer::progress(const std::string& text) {
  if (handlers_.progress) handlers_.progress(text);
}

}  // namespace shim
