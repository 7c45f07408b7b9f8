#include "http/http_connections.hpp"

#include <boost/beast/core/error.hpp>
#include <chrono>

namespace shim {

void http_connections::remove(position pos) {
  open_.erase(pos);
  if (open_.empty()) reset_timerfd();
}

void http_connections::close_oldest() {
  if (!open_.empty()) open_.front()->close();
}

void http_connections::close_all() {
  stopped_ = true;
  while (!open_.empty()) open_.front()->close();
}

// Asio 1.74 cancels a timer without disarming its timerfd, so the read deadline of the connection
// that has just closed would still wake the idle process once (docs/benchmarks.md). Scheduling a
// timer that is the earliest makes Asio re-arm the timerfd to its longest wait (5 minutes).
void http_connections::reset_timerfd() {
  timerfd_reset_.expires_after(std::chrono::minutes(5));
  timerfd_reset_.async_wait([](boost::beast::error_code) {});
  timerfd_reset_.cancel();
}

}  // namespace shim
