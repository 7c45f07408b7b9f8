// event_log: arbitrary bytes as an event log, as `shutdown-shim report` reads it.
// - event_line_reader hands on the same records and skips the same number of lines however the
//   bytes are cut into reads (the cut comes from the input's first byte).
// - shutdown_history keeps at most the boots asked for and gives each a verdict and a detail.
// - one_line on every line is one line within its cap, and keeps valid UTF-8 valid.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "log/log_line.hpp"
#include "report/event_line_reader.hpp"
#include "report/shutdown_history.hpp"

namespace {

constexpr std::size_t kKeep = 3;
constexpr std::size_t kOneLineMax = 40;

void check(bool ok) {
  if (!ok) std::abort();
}

struct read_back {
  std::vector<shim::event_record> records;
  std::uint64_t skipped = 0;
};

read_back read_in_chunks(std::string_view text, std::size_t chunk) {
  read_back out;
  shim::event_line_reader reader(
      {.record = [&out](const shim::event_record& r) { out.records.push_back(r); }});
  for (std::size_t i = 0; i < text.size(); i += chunk) reader.feed(text.substr(i, chunk));
  reader.finish();
  out.skipped = reader.skipped_lines();
  return out;
}

void check_one_line(std::string_view line) {
  const std::string shown = shim::one_line(line, kOneLineMax);
  check(shown.size() <= kOneLineMax);
  for (char c : shown) check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  check(shown.empty() || (shown.front() != ' ' && shown.back() != ' '));
  // Never half a character: valid UTF-8 stays valid (bytes that were not UTF-8 to begin with
  // stay as they were; json_escape shows both as U+FFFD).
  if (shim::json_escape(line).find("\\ufffd") == std::string::npos) {
    check(shim::json_escape(shown).find("\\ufffd") == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  const read_back whole = read_in_chunks(text, text.size() + 1);
  const read_back cut = read_in_chunks(text, chunk);
  check(whole.records.size() == cut.records.size());
  check(whole.skipped == cut.skipped);
  for (std::size_t i = 0; i < whole.records.size(); ++i) {
    check(whole.records[i].event == cut.records[i].event);
    check(whole.records[i].monotonic_us == cut.records[i].monotonic_us);
    check(whole.records[i].boot_id == cut.records[i].boot_id);
    check(!whole.records[i].event.empty());
  }

  shim::shutdown_history history(kKeep, "aaaaaaaa111111112222222233333333");
  for (const auto& r : whole.records) history.add(r);
  const auto boots = history.boots();
  // kKeep boots with a shutdown, and as many of restarts only at most.
  check(boots.size() <= 2 * kKeep);
  std::size_t with_shutdown = 0;
  for (const auto& b : boots) {
    check(shim::to_string(b.verdict()).size() > 0);
    (void)b.detail();
    check(b.last_shutdown || b.restarts > 0);
    if (!b.last_shutdown) {
      check(b.verdict() == shim::shutdown_verdict::restart);
      continue;
    }
    ++with_shutdown;
    // A restart is never a boot's shutdown.
    check(b.verdict() != shim::shutdown_verdict::restart);
    (void)b.last_shutdown->hold();
    (void)b.last_shutdown->records_span();
  }
  check(with_shutdown <= kKeep);

  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    check_one_line(text.substr(start, end - start));
    start = end + 1;
  }
  return 0;
}
