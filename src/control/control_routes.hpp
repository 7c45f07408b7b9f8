#pragma once

#include <boost/beast/http/status.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "http/http_connections.hpp"

namespace shim {

// What the control socket answers (issue 23), apart from the transport: the shim's control
// handlers do the work, route_control() reads the request line and words the refusals.
//   GET  /status[?json]                            200 ready, 503 not ready; the status document
//   POST /drill[?duration=D][&lb-fall=N][&json]    200 started, 409 refused (a shutdown, a drill)
//   GET  /drill[?json]                             the drill under way, or the last one; 404 none
//   POST /drill/stop[?json]                        200 stopped, 409 no drill under way
struct control_reply {
  boost::beast::http::status code = boost::beast::http::status::ok;
  std::string body;
  bool json = false;
};

struct drill_request {
  // Empty: the configured drain-delay, as at a shutdown.
  std::optional<std::chrono::nanoseconds> duration;
  unsigned lb_fall = 3;
  bool json = false;
  std::string who;  // who asked, for the DrillStarted record
};

struct control_handlers {
  std::function<control_reply(bool json)> status;
  std::function<control_reply(const drill_request& request)> start_drill;
  std::function<control_reply(bool json)> drill;
  std::function<control_reply(bool json)> stop_drill;
};

// The socket's name in the state directory.
inline constexpr std::string_view kControlSocketName = "control.sock";

// The longest drill: an hour out of the load balancer is a typo, not a rehearsal of a drain.
inline constexpr std::chrono::hours kMaxDrill{1};
inline constexpr unsigned kMaxLbFall = 100;

// who: the peer, in words ("pid 4242"), for a drill's record.
control_reply route_control(const control_handlers& handlers, boost::beast::http::verb method,
                            std::string_view target, std::string_view who = {});

// The control server's answers: route_control() for each request, the peer's pid as who, one
// answer per connection (the CLI asks once; curl too).
http_answers control_http_answers(control_handlers handlers);

}  // namespace shim
