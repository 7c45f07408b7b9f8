#include "control/control_desk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

#include "util/build_version.hpp"
#include "util/duration_text.hpp"

namespace shim {

namespace {

using http_status = boost::beast::http::status;
using clock = shutdown_sequence::clock;

}  // namespace

control_desk::control_desk(boost::asio::io_context& io, settings s, sequence_runner& runner,
                           load_balancer_watch& lb, shim_status& status, logger& log,
                           event_recorder& events)
    : settings_(std::move(s)),
      runner_(runner),
      lb_(lb),
      status_(status),
      log_(log),
      events_(events),
      server_(io, control_http_answers({
                      .status = [this](bool json) { return this->status(json); },
                      .start_drill = [this](const drill_request& r) { return start_drill(r); },
                      .drill = [this](bool json) { return this->drill(json); },
                      .stop_drill = [this](bool json) { return stop_drill(json); },
                  })) {}

void control_desk::listen(const std::filesystem::path& dir) {
  try {
    server_.listen(dir / kControlSocketName);
  } catch (const std::system_error& e) {
    log_.warning("no control socket: shutdown-shim status and drill cannot reach this shim",
                 {{"error", e.what()}});
  }
}

control_reply control_desk::status(bool json) const {
  const auto& phase = status_.phase;
  const auto now = clock::now();
  status_snapshot snap{
      .status = status_,
      .version = kVersion,
      .signal = settings_.signal,
      .sigterm_policy = settings_.sigterm_policy,
      .signal_delay = status_.plan.signal_delay(),
      .exit_timeout = settings_.exit_timeout,
  };
  if (phase.draining()) {
    snap.elapsed = now - phase.since;
    snap.signal_sent = runner_.sequence().signal_sent();
  }
  if (phase.drilling()) {
    snap.drill_elapsed = now - phase.since;
    snap.drill_left = std::max(phase.ends - now, clock::duration(0));
  }
  if (phase.drilling() || phase.draining()) {
    snap.lb_line = lb_.summary(settings_.drain_delay);
    snap.lb_fields = lb_.fields(settings_.drain_delay);
  }
  snap.last_drill = last_drill_;
  return {.code = status_.ready() ? http_status::ok : http_status::service_unavailable,
          .body = json ? status_json(snap) : status_text(snap),
          .json = json};
}

std::string control_desk::drill_progress() const {
  const auto& phase = status_.phase;
  const auto now = clock::now();
  const auto started = phase.drilling() ? phase.since : now;
  const auto end = phase.drilling() ? phase.ends : now;
  return fmt::format("drill: {} elapsed, {} left; {}",
                     format_duration(std::chrono::round<std::chrono::milliseconds>(now - started)),
                     format_duration(std::chrono::round<std::chrono::seconds>(end - now)),
                     lb_.summary(settings_.drain_delay));
}

control_reply control_desk::start_drill(const drill_request& r) {
  if (auto why = runner_.sequence().drill_refusal()) {
    return {.code = http_status::conflict, .body = "no drill: " + *why + "\n", .json = false};
  }
  const auto length = r.duration.value_or(settings_.drain_delay);
  if (length <= std::chrono::nanoseconds(0)) {
    return {.code = http_status::bad_request,
            .body = "no drill: --drain-delay is 0s; give the drill a --duration\n",
            .json = false};
  }
  drill_fall_ = r.lb_fall;
  const std::string cause = r.who.empty() ? "shutdown-shim drill" : "shutdown-shim drill, " + r.who;
  runner_.feed([now = clock::now(), d = std::chrono::duration_cast<clock::duration>(length),
                cause](shutdown_sequence& s) { return s.drill(now, d, cause); });
  return drill(r.json);
}

control_reply control_desk::drill(bool json) const {
  const hold_phase phase = runner_.sequence().phase();
  if (!phase.drilling() && last_drill_.empty()) {
    return {.code = http_status::not_found, .body = "no drill since the shim started\n"};
  }
  const std::string line = phase.drilling() ? drill_progress() : "last drill: " + last_drill_;
  if (!json) return {.code = http_status::ok, .body = line + "\n", .json = false};
  // Flat, so that the CLI reads it with the event log's reader.
  log_fields members = lb_.fields(settings_.drain_delay);
  members.insert(members.begin(), {{"drilling", phase.drilling() ? "yes" : "no"},
                                   {"summary", line},
                                   {"checkers", lb_.has_checkers() ? "yes" : "no"}});
  std::string body;
  for (const auto& [key, value] : members) {
    body += body.empty() ? '{' : ',';
    append_json_string(body, key, value);
  }
  body += "}\n";
  return {.code = http_status::ok, .body = body, .json = true};
}

control_reply control_desk::stop_drill(bool json) {
  if (!runner_.sequence().phase().drilling()) {
    return {.code = http_status::conflict, .body = "no drill under way\n", .json = false};
  }
  runner_.feed([](shutdown_sequence& s) { return s.stop_drill("shutdown-shim drill --stop"); });
  return drill(json);
}

void control_desk::drill_started(const shutdown_sequence::action& a) {
  const auto end = runner_.sequence().phase().ends;
  ++status_.drills;
  lb_.begin(a.at, drill_fall_);
  // Said at once: with no remote checker the drill cannot take the node out of the LB.
  log_fields fields{{"duration", format_duration(end - a.at)},
                    {"drain_delay", format_duration(settings_.drain_delay)},
                    {"lb", lb_.summary(settings_.drain_delay)}};
  events_.record(event_kind::DrillStarted, a.cause, a.message, fields, a.at);
  if (!lb_.has_checkers()) log_.warning(lb_.summary(settings_.drain_delay));
}

void control_desk::drill_ended(const shutdown_sequence::action& a) {
  const auto served = std::chrono::round<std::chrono::milliseconds>(clock::now() - a.at);
  // A drill that became a shutdown goes on measuring for it.
  if (a.cause != "shutdown") lb_.end();
  log_fields fields{{"outcome", a.cause}, {"served", format_duration(served)}};
  for (auto& f : lb_.fields(settings_.drain_delay)) fields.push_back(std::move(f));
  last_drill_ = fmt::format("{} after {}, at {}: {}", a.cause, format_duration(served),
                            format_wall_time(std::chrono::system_clock::now()),
                            lb_.summary(settings_.drain_delay));
  events_.record(event_kind::DrillEnded, a.cause, "drill " + last_drill_, fields);
}

}  // namespace shim
