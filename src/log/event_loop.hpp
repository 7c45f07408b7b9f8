#pragma once

#include <boost/asio/io_context.hpp>
#include <exception>
#include <string>
#include <string_view>

#include "log/logger.hpp"

namespace shim {

// A failure on the loop that no handler can report further (result.hpp), in one wording; the
// handler goes on, and so does the rest of its batch.
inline void log_loop_failure(logger& log, std::string_view error) {
  log.error("a handler on the event loop failed; the loop goes on",
            {{"error", std::string(error)}});
}

// Runs `io` until it stops. What an input can cause must never stop the daemon, yet a library may
// throw (issue 18, item 2: Boost.Beast's parser reserving 1 TiB): the handler that threw is gone,
// the error is logged, and the loop goes on.
inline void run_event_loop(boost::asio::io_context& io, logger& log) {
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
