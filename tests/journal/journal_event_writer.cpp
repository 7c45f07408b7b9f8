// Records the lifecycle events named on the command line the way the daemon does: through the
// logger on stderr and the event_recorder, to the event log and, when stderr is the journal, to
// journald. tests/journal/journal_test.py runs it in the boots it makes, so that the journal and
// the event log hold the same events and `report` can be asked about both.
//
// usage: journal_event_writer EVENT_LOG EVENT...
// ShutdownInitiated gets logind's cause and InhibitDelayMaxUSec as the daemon records them;
// KubeletShutdown a message of two lines (the native protocol's binary form).

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "log/event_recorder.hpp"
#include "log/logger.hpp"

namespace {

std::optional<shim::event_kind> kind_named(std::string_view name) {
  for (std::size_t i = 0; i < shim::kEvents.size(); ++i) {
    if (shim::kEvents[i].name == name) return static_cast<shim::event_kind>(i);
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fputs("usage: journal_event_writer EVENT_LOG EVENT...\n", stderr);
    return 2;
  }
  auto log = shim::logger::for_stderr(shim::log_format::text);
  shim::event_recorder events(log, argv[1],
                              log.to_journal() ? std::string(shim::journal_socket::kPath) : "");
  for (int i = 2; i < argc; ++i) {
    const auto kind = kind_named(argv[i]);
    if (!kind) {
      std::fprintf(stderr, "journal_event_writer: no event %s\n", argv[i]);
      return 2;
    }
    switch (*kind) {
      case shim::event_kind::ShutdownInitiated:
        events.record(*kind, "PrepareForShutdown(true)", "the system is shutting down",
                      {{"inhibit_delay_max_usec", "150000000"}, {"pid", "4242"}});
        break;
      case shim::event_kind::KubeletShutdown:
        events.record(*kind, "PrepareForShutdown(true)",
                      "kubelet drains its pods first\nthen the shim's signal");
        break;
      default:
        events.record(*kind, "test", std::string("test: ") + argv[i]);
    }
  }
  return events.failed_records() == 0 ? 0 : 1;
}
