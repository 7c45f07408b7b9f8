#include "control/control_routes.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "http/http_answer.hpp"
#include "http/url_query.hpp"
#include "util/ascii_digits.hpp"
#include "util/duration_text.hpp"

namespace shim {

namespace {

namespace http = boost::beast::http;

control_reply refuse(http::status code, std::string words) {
  return {.code = code, .body = std::move(words) + "\n", .json = false};
}

struct parsed_target {
  std::string_view path;
  drill_request request;  // json, duration and lb-fall as asked
  std::string error;      // a bad parameter
};

parsed_target parse_target(std::string_view target) {
  parsed_target out;
  out.path = path_of(target);
  std::string_view query = query_of(target);
  while (const auto item = next_query_item(query)) {
    if (item->key == "json") {
      out.request.json = true;
    } else if (item->key == "duration") {
      try {
        const auto d = parse_duration(item->value);
        if (d <= std::chrono::nanoseconds(0) || d > kMaxDrill) {
          out.error = fmt::format("duration {}: a drill lasts more than 0s and at most {}",
                                  item->value, format_duration(kMaxDrill));
        }
        out.request.duration = d;
      } catch (const std::invalid_argument& e) {
        out.error = fmt::format("duration: {}", e.what());
      }
    } else if (item->key == "lb-fall") {
      const auto n = parse_decimal<unsigned>(item->value);
      if (!n || *n == 0 || *n > kMaxLbFall) {
        out.error = fmt::format("lb-fall {}: want a count from 1 to {}", item->value, kMaxLbFall);
      }
      out.request.lb_fall = n.value_or(0);
    } else {
      out.error = fmt::format("unknown parameter {}", item->key.substr(0, 64));
    }
  }
  return out;
}

}  // namespace

control_reply route_control(const control_handlers& handlers, http::verb method,
                            std::string_view target, std::string_view who) {
  const parsed_target t = parse_target(target);
  const bool get = method == http::verb::get || method == http::verb::head;
  const bool post = method == http::verb::post;
  const auto wrong_method = [&](std::string_view allowed) {
    return refuse(http::status::method_not_allowed,
                  fmt::format("{} takes {} only", t.path, allowed));
  };
  if (t.path == "/status") {
    if (!get) return wrong_method("GET");
    if (!t.error.empty()) return refuse(http::status::bad_request, t.error);
    return handlers.status(t.request.json);
  }
  if (t.path == "/drill") {
    if (!t.error.empty()) return refuse(http::status::bad_request, t.error);
    if (get) return handlers.drill(t.request.json);
    if (!post) return wrong_method("GET or POST");
    drill_request request = t.request;
    request.who = who;
    return handlers.start_drill(request);
  }
  if (t.path == "/drill/stop") {
    if (!post) return wrong_method("POST");
    if (!t.error.empty()) return refuse(http::status::bad_request, t.error);
    return handlers.stop_drill(t.request.json);
  }
  return refuse(http::status::not_found,
                "no such path; the control socket answers GET /status, GET or POST /drill, "
                "POST /drill/stop");
}

http_answers control_http_answers(control_handlers handlers) {
  return {
      .respond =
          [handlers = std::move(handlers)](const http_request& request, const http_peer& peer,
                                           http_request_counts& counts, std::string& out) {
            const auto* unix = std::get_if<unix_peer>(&peer);
            const std::string who = unix ? fmt::format("pid {}", unix->pid) : std::string();
            const control_reply reply =
                route_control(handlers, request.method(), request.target(), who);
            counts.add(http_handler::other, static_cast<unsigned>(reply.code));
            append_closing_answer(reply.code, reply.body, out,
                                  reply.json ? "application/json" : "text/plain; charset=utf-8");
            return false;
          },
      .refuse = append_refusal,
  };
}

}  // namespace shim
