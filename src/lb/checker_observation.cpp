#include "lb/checker_observation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <utility>

#include "util/joined.hpp"

namespace shim {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// Seconds with one decimal, as the issue words them: "+2.1 s".
double seconds(checker_observation::duration d) { return std::chrono::duration<double>(d).count(); }

std::string ms_text(checker_observation::duration d) {
  return std::to_string(duration_cast<milliseconds>(d).count());
}

// "70 s" for whole seconds (a drain-delay as configured), "0.5 s" otherwise.
std::string drain_text(checker_observation::duration d) {
  if (d % std::chrono::seconds(1) == checker_observation::duration::zero()) {
    return fmt::format("{} s", std::chrono::duration_cast<std::chrono::seconds>(d).count());
  }
  return fmt::format("{:.1f} s", seconds(d));
}

std::string probes_text(unsigned n) { return fmt::format("{} probe{}", n, n == 1 ? "" : "s"); }

// Not fallen first (fewest probes since: the slowest checkers), then the latest fall.
bool slower(const checker_observation::checker& a, const checker_observation::checker& b) {
  if (a.fell.has_value() != b.fell.has_value()) return !a.fell;
  if (!a.fell) return a.probes_since < b.probes_since;
  return *a.fell > *b.fell;
}

// At most this many of the checkers that have not fallen are named in the one-line summary.
constexpr std::size_t kNamedLaggards = 3;

// The first n of list, ", " between them.
std::string first(const std::vector<std::string>& list, std::size_t n) {
  return joined(std::span(list).first(std::min(n, list.size())), ", ");
}

}  // namespace

checker_observation::checker_observation(unsigned fall, duration elapsed,
                                         std::vector<checker> checkers,
                                         std::vector<std::string> not_counted, bool table_full)
    : fall_(fall),
      elapsed_(elapsed),
      checkers_(std::move(checkers)),
      not_counted_(std::move(not_counted)),
      table_full_(table_full) {
  std::stable_sort(checkers_.begin(), checkers_.end(), slower);
}

std::size_t checker_observation::fallen() const {
  return std::count_if(checkers_.begin(), checkers_.end(),
                       [](const checker& c) { return c.fell.has_value(); });
}

std::optional<checker_observation::duration> checker_observation::all_fell() const {
  // Sorted slowest first: the front is the last to fall, or one that has not.
  if (checkers_.empty()) return std::nullopt;
  return checkers_.front().fell;
}

std::string checker_observation::summary(duration drain_delay) const {
  std::string text = checkers_summary(drain_delay);
  if (!not_counted_.empty()) text += "; not counted: " + first(not_counted_, kNamedLaggards);
  if (not_counted_.size() > kNamedLaggards) {
    text += fmt::format(" and {} more", not_counted_.size() - kNamedLaggards);
  }
  if (table_full_) {
    text += "; the table of probing addresses was full: newer addresses were not followed";
  }
  return text;
}

std::string checker_observation::checkers_summary(duration drain_delay) const {
  if (checkers_.empty()) {
    return "no remote checker probed /readyz in the minute before: unready cannot take this node "
           "out of a load balancer that checks kube-apiserver itself, the drain rests on "
           "kube-apiserver's own readiness after its signal";
  }
  const std::size_t n = checkers_.size();
  if (auto last = all_fell()) {
    std::string text =
        fmt::format("{} checker{} saw {} x 503 by +{:.1f} s; drain-delay {} ", n, n == 1 ? "" : "s",
                    fall_, seconds(*last), drain_text(drain_delay));
    if (*last <= drain_delay) {
      return text + fmt::format("leaves {:.1f} s for propagation", seconds(drain_delay - *last));
    }
    return text + fmt::format("is {:.1f} s short of that", seconds(*last - drain_delay));
  }
  const std::size_t fallen_count = fallen();
  std::string text =
      fallen_count == 0
          ? fmt::format("none of {} checker{} saw {} x 503", n, n == 1 ? "" : "s", fall_)
          : fmt::format("{} of {} checkers saw {} x 503 by +{:.1f} s", fallen_count, n, fall_,
                        seconds(*checkers_[n - fallen_count].fell));
  text += fmt::format("; not yet by +{:.1f} s:", seconds(elapsed_));
  const std::size_t laggards = n - fallen_count;
  for (std::size_t i = 0; i < std::min(laggards, kNamedLaggards); ++i) {
    const checker& c = checkers_[i];
    text += fmt::format("{} {} ({} x 503 in a row, {} since)", i == 0 ? "" : ",", c.address,
                        c.unready_run, probes_text(c.probes_since));
  }
  if (laggards > kNamedLaggards) text += fmt::format(" and {} more", laggards - kNamedLaggards);
  return text;
}

std::string checker_observation::describe(const checker& c, unsigned fall) {
  std::string text = c.address;
  text += fmt::format(" every {:.1f} s", seconds(c.interval));
  text += fmt::format(": {} since", probes_text(c.probes_since));
  if (c.first_unready) text += fmt::format(", first 503 at +{:.1f} s", seconds(*c.first_unready));
  if (c.fell) text += fmt::format(", {} x 503 at +{:.1f} s", fall, seconds(*c.fell));
  return text;
}

log_fields checker_observation::fields(duration drain_delay) const {
  log_fields f;
  f.emplace_back("lb_fall", std::to_string(fall_));
  f.emplace_back("lb_elapsed_ms", ms_text(elapsed_));
  f.emplace_back("lb_checkers", std::to_string(checkers_.size()));
  f.emplace_back("lb_checkers_fallen", std::to_string(fallen()));
  if (auto last = all_fell()) {
    f.emplace_back("lb_fell_ms", ms_text(*last));
    f.emplace_back("lb_drain_left_ms", ms_text(drain_delay - *last));
  }
  if (!not_counted_.empty()) {
    f.emplace_back("lb_not_counted", std::to_string(not_counted_.size()));
    f.emplace_back("lb_not_counted_list", first(not_counted_, kListedCheckers));
  }
  if (table_full_) f.emplace_back("lb_table_full", "1");
  for (std::size_t i = 0; i < std::min(checkers_.size(), kListedCheckers); ++i) {
    const checker& c = checkers_[i];
    const std::string key = fmt::format("lb_checker{}_", i + 1);
    f.emplace_back(key + "address", c.address);
    f.emplace_back(key + "interval_ms", ms_text(c.interval));
    f.emplace_back(key + "probes_before", std::to_string(c.probes_before));
    f.emplace_back(key + "probes_since", std::to_string(c.probes_since));
    if (c.first_unready) f.emplace_back(key + "first_unready_ms", ms_text(*c.first_unready));
    if (c.fell) f.emplace_back(key + "fell_ms", ms_text(*c.fell));
  }
  return f;
}

}  // namespace shim
