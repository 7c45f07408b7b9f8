#include "logind/bus_link.hpp"

namespace shim {

bus_link::bus_link(boost::asio::io_context& io, handlers h)
    : io_(io), handlers_(std::move(h)), retry_timer_(io) {}

bus_link::~bus_link() {
  if (bus_) bus_->close();
}

namespace {

// A connection that stayed up this long was a good one: the next loss starts the backoff afresh.
// A shorter one (a bus that accepts and drops us at once) keeps growing it, so nothing spins.
constexpr std::chrono::seconds kHealthyConnection{10};

}  // namespace

void bus_link::start() {
  auto opened =
      bus_connection::open_system(io_, [this](std::string why) { on_lost(std::move(why)); });
  if (!opened) return retry_later(opened.error());
  bus_ = opened.value();
  opened_at_ = std::chrono::steady_clock::now();
  if (handlers_.connected) handlers_.connected(*bus_);
}

void bus_link::on_lost(std::string why) {
  // bus_connection has closed itself; the clients drop their slots before the last reference goes.
  auto gone = std::move(bus_);
  if (handlers_.lost) handlers_.lost(why);
  gone.reset();
  if (std::chrono::steady_clock::now() - opened_at_ >= kHealthyConnection) backoff_.reset();
  retry_later(why);
}

void bus_link::retry_later(const std::string& why) {
  const auto delay = backoff_.next();
  if (handlers_.retrying) handlers_.retrying(why, delay);
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) start();
  });
}

}  // namespace shim
