#include "http/readiness_server.hpp"

#include <fcntl.h>
#include <sys/resource.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <string>
#include <utility>

#include "http/http_answer.hpp"
#include "http/http_connections.hpp"
#include "http/http_listeners.hpp"

namespace shim {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

readiness_server::readiness_server(asio::io_context& io, const shim_status& status,
                                   http_limits limits, readyz_observer observer)
    : state_(std::make_shared<http_listeners<tcp>>(
          io, std::make_shared<http_connections>(
                  io, limits, readiness_answers(status, std::move(observer))))) {}

readiness_server::~readiness_server() { stop(); }

void readiness_server::listen(const std::vector<listen_address>& addresses) {
  auto& state = *state_;
  // All or nothing: nothing is listening when one of the addresses fails.
  std::vector<std::shared_ptr<http_listeners<tcp>::listener>> opened;
  for (const auto& address : addresses) {
    beast::error_code ec;
    const std::string where = "listen on " + format_listen_address(address);
    const auto ip = asio::ip::make_address(address.host, ec);
    if (ec) throw_listen_error(ec, where);
    const tcp::endpoint endpoint{ip, address.port};
    auto l = std::make_shared<http_listeners<tcp>::listener>(state.io);
    auto& acceptor = l->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    if (ec) throw_listen_error(ec, where);
    // Not inherited by a child started in wrapper mode.
    ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (ec) throw_listen_error(ec, where);
    if (ip.is_v6()) {
      // So that 0.0.0.0:P and [::]:P can both be bound.
      acceptor.set_option(asio::ip::v6_only(true), ec);
      if (ec) throw_listen_error(ec, where);
    }
    acceptor.bind(endpoint, ec);
    if (ec) throw_listen_error(ec, where);
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw_listen_error(ec, where);
    opened.push_back(std::move(l));
  }
  state.connections->restart();
  auto& limits = state.connections->limits();
  if (limits.max_connections == 0) {
    rlimit descriptors{};
    ::getrlimit(RLIMIT_NOFILE, &descriptors);
    limits.max_connections = connection_cap(descriptors.rlim_cur);
  }
  for (auto& l : opened) {
    state.endpoints.push_back(l->acceptor.local_endpoint());
    state.listeners.push_back(l);
    state.accept(l);
  }
}

std::vector<tcp::endpoint> readiness_server::endpoints() const { return state_->endpoints; }

const http_request_counts& readiness_server::request_counts() const {
  return state_->connections->counts();
}

void readiness_server::stop() { state_->stop(); }

}  // namespace shim
