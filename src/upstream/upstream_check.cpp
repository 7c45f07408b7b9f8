#include "upstream/upstream_check.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <utility>

#include "upstream/upstream_probe.hpp"

namespace shim {
namespace {

constexpr std::array<std::string_view, 9> kFailureNames{
    "none", "timeout", "refused", "connect", "tls", "status", "protocol", "oversize", "config"};
static_assert(kFailureNames.size() == static_cast<std::size_t>(probe_failure::config) + 1,
              "one name per probe_failure, in the same order");

}  // namespace

std::string_view to_string(probe_failure f) { return kFailureNames[static_cast<std::size_t>(f)]; }

std::span<const std::string_view> probe_failure_reasons() {
  return std::span(kFailureNames).subspan(1);
}

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
      row_(row.emplace(settings.url.text(), settings.fall, settings.rise, settings.timeout,
                       probe_failure_reasons())),
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
  const bool changed = row_.record(
      {.pass = outcome.pass(), .error = outcome.error, .at = std::chrono::system_clock::now()},
      to_string(outcome.failure), outcome.duration);
  if (!changed) return;
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
