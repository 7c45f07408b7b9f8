#include "log/event_loop.hpp"

#include <exception>
#include <string>

namespace shim {

void log_loop_failure(logger& log, std::string_view error) {
  log.error("a handler on the event loop failed; the loop goes on",
            {{"error", std::string(error)}});
}

void run_event_loop(boost::asio::io_context& io, logger& log) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      log_loop_failure(log, e.what());
    }
  }
}

}  // namespace shim
