// Runs a test's io_context until a condition holds (the readiness server's and the control
// socket's tests).

#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>

namespace shim {

// Runs `io` until `done`. The deadline only keeps a broken server from hanging the test; no test
// asserts how long anything takes.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (io.stopped()) io.restart();
    if (io.run_one_until(deadline) == 0) return done();
  }
  return true;
}

}  // namespace shim
