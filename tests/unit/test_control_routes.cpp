#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "control/control_routes.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;
namespace http = boost::beast::http;

struct recorder {
  std::vector<std::string> calls;
  std::optional<drill_request> drill;
  control_handlers handlers() {
    return {.status = [this](bool json) { return reply("status", json); },
            .start_drill =
                [this](const drill_request& r) {
                  drill = r;
                  return reply("start", r.json);
                },
            .drill = [this](bool json) { return reply("drill", json); },
            .stop_drill = [this](bool json) { return reply("stop", json); }};
  }
  control_reply reply(std::string what, bool json) {
    calls.push_back(what + (json ? "+json" : ""));
    return {.code = http::status::ok, .body = what, .json = json};
  }
};

TEST(ControlRoutes, EachPathReachesItsHandler) {
  recorder r;
  const auto h = r.handlers();
  EXPECT_EQ(route_control(h, http::verb::get, "/status").body, "status");
  route_control(h, http::verb::get, "/status?json");
  route_control(h, http::verb::head, "/status");
  route_control(h, http::verb::post, "/drill");
  route_control(h, http::verb::get, "/drill?json");
  route_control(h, http::verb::post, "/drill/stop");
  EXPECT_THAT(r.calls, testing::ElementsAre("status", "status+json", "status", "start",
                                            "drill+json", "stop"));
}

TEST(ControlRoutes, ADrillTakesItsDurationAndFall) {
  recorder r;
  route_control(r.handlers(), http::verb::post, "/drill?duration=1m30s&lb-fall=2&json");
  ASSERT_TRUE(r.drill);
  EXPECT_EQ(r.drill->duration, 90s);
  EXPECT_EQ(r.drill->lb_fall, 2u);
  EXPECT_TRUE(r.drill->json);
  route_control(r.handlers(), http::verb::post, "/drill");
  EXPECT_FALSE(r.drill->duration) << "the drain-delay, chosen by the shim";
  EXPECT_EQ(r.drill->lb_fall, 3u) << "the usual fall";
}

TEST(ControlRoutes, BadParametersAreRefusedBeforeAnyHandler) {
  recorder r;
  const auto h = r.handlers();
  for (std::string_view target : {"/drill?duration=0s", "/drill?duration=2h", "/drill?duration=x",
                                  "/drill?duration=-1s", "/drill?lb-fall=0", "/drill?lb-fall=101",
                                  "/drill?lb-fall=3x", "/drill?lb-fall=", "/drill?bogus=1"}) {
    const auto reply = route_control(h, http::verb::post, target);
    EXPECT_EQ(reply.code, http::status::bad_request) << target;
    EXPECT_EQ(reply.body.back(), '\n');
  }
  EXPECT_TRUE(r.calls.empty());
  EXPECT_THAT(route_control(h, http::verb::post, "/drill?duration=2h").body,
              HasSubstr("at most 1h0m0s"));
}

TEST(ControlRoutes, WrongMethodsAndPathsAreRefused) {
  recorder r;
  const auto h = r.handlers();
  EXPECT_EQ(route_control(h, http::verb::post, "/status").code, http::status::method_not_allowed);
  EXPECT_EQ(route_control(h, http::verb::get, "/drill/stop").code,
            http::status::method_not_allowed);
  EXPECT_EQ(route_control(h, http::verb::delete_, "/drill").code, http::status::method_not_allowed);
  const auto missing = route_control(h, http::verb::get, "/readyz");
  EXPECT_EQ(missing.code, http::status::not_found);
  EXPECT_THAT(missing.body, HasSubstr("GET /status"));
  EXPECT_TRUE(r.calls.empty());
}

}  // namespace
}  // namespace shim
