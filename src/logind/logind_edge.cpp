#include "logind/logind_edge.hpp"

#include <fmt/format.h>

#include "util/duration_text.hpp"

namespace shim {

logind_edge::logind_edge(boost::asio::io_context& io, logind_settings cfg, logger& log,
                         event_recorder& events, logind_row& row, logind_events& on)
    : io_(io), cfg_(std::move(cfg)), log_(log), events_(events), row_(row), on_(on) {}

void logind_edge::start() {
  const auto why = fmt::format(
      "Keeping the reboot until kube-apiserver has left the load balancer (drain {}, up to {})",
      format_duration(cfg_.drain_delay), format_duration(cfg_.drain_delay + cfg_.exit_timeout));
  inhibitor_ = std::make_unique<logind_inhibitor>(io_, log_, why, *this);
  manager_ = std::make_unique<systemd_manager>(io_);
  if (cfg_.ensure_inhibit_delay != ensure_mode::off) {
    ensurer_ = std::make_unique<inhibit_delay_ensurer>(
        io_, log_, events_, cfg_,
        inhibit_delay_ensurer::bus_calls{
            .reload_logind = [this](auto done) { manager_->reload_logind(std::move(done)); },
            // What it reads is what logind now says: shown as such.
            .read_inhibit_delay =
                [this](auto done) {
                  inhibitor_->read_inhibit_delay(
                      [this, done = std::move(done)](const result<std::uint64_t>& usec) {
                        if (usec) {
                          row_.delay_max_usec = usec.value();
                          on_.row_changed();
                        }
                        done(usec);
                      });
                },
        },
        inhibit_delay_ensurer::handlers{
            .progress =
                [this](const std::string& text) {
                  row_.delay_ensure = text;
                  on_.row_changed();
                },
            .finished =
                [this](const result<>& outcome) {
                  if (!outcome && cfg_.ensure_inhibit_delay == ensure_mode::required) {
                    on_.ensure_failed(outcome.error());
                  }
                },
        });
  }
  bus_ = std::make_unique<bus_link>(
      io_,
      bus_link::handlers{
          .connected =
              [this](bus_connection& bus) {
                if (was_lost_) {
                  was_lost_ = false;
                  events_.record(event_kind::BusRestored, "reconnected", "the system bus is back");
                }
                manager_->connected(bus);
                inhibitor_->connected(bus);
              },
          .lost = [this](const std::string& why) { on_lost(why); },
          .retrying =
              [this](const std::string& why, std::chrono::milliseconds delay) {
                log_.info(
                    fmt::format("connecting to the system bus again in {}", format_duration(delay)),
                    {{"why", why}});
                if (!first_attempt_done_) first_attempt_done(result<>::failure(why));
              },
      });
  bus_->start();
}

void logind_edge::ask_system_state() {
  manager_->system_state(
      [this](const result<std::string>& state) { on_.system_state_read(state); });
}

void logind_edge::on_lost(const std::string& why) {
  was_lost_ = true;
  events_.record(event_kind::BusLost, why, "lost the system bus; keeping the lock fd, reconnecting",
                 {{"lock_held", inhibitor_->held() ? "true" : "false"}});
  manager_->lost();
  inhibitor_->lost(why);
}

void logind_edge::lock_changed(logind_inhibitor::lock_state state, const std::string& detail) {
  using lock = logind_inhibitor::lock_state;
  using shown = logind_row::inhibitor_state;
  switch (state) {
    case lock::held:
      row_.inhibitor = shown::held;
      events_.record(event_kind::InhibitorTaken, first_attempt_done_ ? "re-taken" : "start",
                     "holding a logind delay lock on shutdown");
      break;
    case lock::retrying:
      // Until the first attempt is over the check fails; after it, a lost lock is a transient
      // fault: reported, retried, not turned into unreadiness.
      row_.inhibitor = first_attempt_done_ ? shown::retrying : shown::pending;
      break;
    case lock::released:
      // Recorded by the shim's release_inhibitor action, which alone releases it and knows why.
      row_.inhibitor = shown::released;
      break;
  }
  row_.inhibitor_detail = detail;
  on_.row_changed();
}

void logind_edge::first_attempt_done(const result<>& outcome) {
  if (first_attempt_done_) return;
  first_attempt_done_ = true;
  if (row_.inhibitor == logind_row::inhibitor_state::pending) {
    row_.inhibitor = logind_row::inhibitor_state::retrying;
  }
  on_.first_attempt_done(outcome);
}

void logind_edge::inhibit_delay_read(std::uint64_t usec) {
  row_.delay_max_usec = usec;
  if (auto warning = row_.delay_warning(cfg_.drain_delay + cfg_.exit_timeout)) {
    log_.warning(*warning, {{"InhibitDelayMaxUSec", std::to_string(usec)}});
  }
  on_.row_changed();
  if (ensurer_) ensurer_->start(usec);
}

}  // namespace shim
