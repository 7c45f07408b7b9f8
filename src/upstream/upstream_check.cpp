#include "upstream/upstream_check.hpp"

#include <fmt/format.h>

#include <chrono>
#include <utility>

#include "upstream/upstream_probe.hpp"

namespace shim {

upstream_check::upstream_check(boost::asio::io_context& io, const upstream_settings& settings,
                               logger& log, event_recorder& events,
                               std::optional<upstream_status>& row, handlers h)
    : upstream_check(settings, log, events, row, std::move(h),
                     [&io, &settings](std::function<void(const probe_outcome&)> probed) {
                       return std::make_unique<upstream_probe>(io, settings, std::move(probed));
                     }) {}

upstream_check::upstream_check(const upstream_settings& settings, logger& log,
                               event_recorder& events, std::optional<upstream_status>& row,
                               handlers h, const make_probe& make)
    : log_(log),
      events_(events),
      row_(row.emplace(settings.url.text(), settings.fall, settings.rise, settings.timeout)),
      handlers_(std::move(h)) {
  if (settings.insecure_skip_verify) {
    log_.warning(
        "--upstream-insecure-skip-verify: the upstream's certificate is not verified, so "
        "whatever answers on that address can pass the upstream check",
        {{"url", row_.url()}});
  }
  probe_ = make([this](const probe_outcome& o) { probed(o); });
}

upstream_check::~upstream_check() = default;

void upstream_check::start() { probe_->start(); }

void upstream_check::pause() {
  probe_->stop();
  row_.pause();
}

void upstream_check::resume() {
  if (!row_.paused()) return;
  row_.restart();
  probe_->start();
}

void upstream_check::stop() { probe_->stop(); }

void upstream_check::probed(const probe_outcome& outcome) {
  // A CA, certificate, key or token file that is missing or unusable: on a node being installed it
  // may appear later, so the probe tries it again at every interval; said once per problem.
  const std::string problem = outcome.failure == probe_failure::config ? outcome.error : "";
  if (!problem.empty() && problem != problem_) {
    log_.warning("the upstream check cannot probe; trying again at every interval",
                 {{"url", row_.url()}, {"error", problem}});
  }
  problem_ = problem;
  if (!row_.record(outcome, std::chrono::system_clock::now())) return;
  if (row_.passed()) {
    events_.record(
        event_kind::UpstreamPassed, "rise",
        fmt::format("the upstream /readyz passed {} times in a row", row_.consecutive_passes()),
        {{"url", row_.url()}, {"consecutive", std::to_string(row_.consecutive_passes())}});
  } else {
    events_.record(event_kind::UpstreamFailed, outcome.error,
                   fmt::format("the upstream /readyz failed {} times in a row, last: {}",
                               row_.consecutive_failures(), outcome.error),
                   {{"url", row_.url()},
                    {"consecutive", std::to_string(row_.consecutive_failures())},
                    {"reason", std::string(to_string(outcome.failure))},
                    {"error", outcome.error}});
  }
  if (handlers_.changed) handlers_.changed();
}

}  // namespace shim
