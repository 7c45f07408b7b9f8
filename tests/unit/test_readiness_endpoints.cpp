// The answers without a socket: /readyz and its verbose form, HEAD, /livez and /healthz, unknown
// paths and methods, keep-alive and version, the counts of answers by code.

#include "http/http_answer.hpp"
#include "readiness_server_test_support.hpp"

namespace shim::readiness_test {
namespace {

TEST_F(HandleRequest, ReadyzReadyIs200Ok) {
  auto status = ready_status();
  ASSERT_TRUE(status.ready());
  const auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response.body(), "ok");
  EXPECT_EQ(response[http::field::content_length], "2");
  EXPECT_TRUE(response.keep_alive());
  expect_plain_text_headers(response);
}

TEST_F(HandleRequest, ReadyzDrainingIs503WithReasonWithheld) {
  auto status = ready_status();
  start_drain(status);
  ASSERT_FALSE(status.ready());
  const auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  expect_plain_text_headers(response);
  const auto lines = lines_of(response.body());
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(has_line(response.body(), "[-]shutdown failed: reason withheld")) << response.body();
  EXPECT_EQ(lines.back(), "readyz check failed");
  // The plain form never shows the details.
  EXPECT_EQ(response.body().find("SIGTERM"), std::string::npos) << response.body();
}

TEST_F(HandleRequest, ReadyzNotYetReadyIs503) {
  shim_status status;  // listener not bound, inhibitor pending
  ASSERT_FALSE(status.ready());
  auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  EXPECT_EQ(lines_of(response.body()).back(), "readyz check failed");

  status.listener_bound = true;
  ASSERT_FALSE(status.ready());  // the first inhibitor attempt has not finished
  response = answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  EXPECT_TRUE(has_line(response.body(), "[-]inhibitor failed: reason withheld")) << response.body();
}

TEST_F(HandleRequest, ReadyzVerboseListsChecks) {
  auto status = ready_status();
  for (const auto* target : {"/readyz?verbose", "/readyz?verbose=1", "/readyz?verbose=true",
                             "/readyz?verbose=", "/readyz?foo=bar&verbose"}) {
    SCOPED_TRACE(target);
    const auto response = answer_to(status, counts, make_request(http::verb::get, target));
    EXPECT_EQ(response.result(), http::status::ok);
    expect_plain_text_headers(response);
    EXPECT_EQ(lines_of(response.body()), expected_verbose_lines(status));
    EXPECT_TRUE(has_line(response.body(), "[+]shutdown ok")) << response.body();
    EXPECT_EQ(lines_of(response.body()).back(), "readyz check passed");
  }
}

TEST_F(HandleRequest, ReadyzVerboseDrainingShowsDetail) {
  auto status = ready_status();
  start_drain(status);
  const auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz?verbose"));
  EXPECT_EQ(response.result(), http::status::service_unavailable);
  EXPECT_EQ(lines_of(response.body()), expected_verbose_lines(status));
  EXPECT_NE(response.body().find("[-]shutdown failed: "), std::string::npos) << response.body();
  EXPECT_NE(response.body().find("SIGTERM"), std::string::npos) << response.body();
  EXPECT_EQ(lines_of(response.body()).back(), "readyz check failed");
}

TEST_F(HandleRequest, ReadyzVerboseShowsDetailOfPassingChecks) {
  auto status = ready_status();
  status.logind.inhibitor = logind_row::inhibitor_state::retrying;
  status.logind.inhibitor_detail = "bus lost";
  status.logind.delay_max_usec = 5'000'000;  // 5s < hold_needed
  ASSERT_TRUE(status.ready());
  const auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz?verbose"));
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(lines_of(response.body()), expected_verbose_lines(status));
  EXPECT_NE(response.body().find("[+]inhibitor ok: "), std::string::npos) << response.body();
  EXPECT_NE(response.body().find("bus lost"), std::string::npos) << response.body();
}

TEST_F(HandleRequest, ReadyzOtherQueriesAreNotVerbose) {
  auto status = ready_status();
  for (const auto* target : {"/readyz?verbose=0", "/readyz?verbose=false", "/readyz?x=1",
                             "/readyz?verbosex", "/readyz?"}) {
    SCOPED_TRACE(target);
    const auto response = answer_to(status, counts, make_request(http::verb::get, target));
    EXPECT_EQ(response.result(), http::status::ok);
    EXPECT_EQ(response.body(), "ok");
  }
}

TEST_F(HandleRequest, HeadHasStatusAndLengthButNoBody) {
  auto status = ready_status();
  for (const auto* target : {"/readyz", "/readyz?verbose", "/livez", "/healthz", "/metrics"}) {
    SCOPED_TRACE(target);
    const auto get = answer_to(status, counts, make_request(http::verb::get, target));
    const auto head = answer_to(status, counts, make_request(http::verb::head, target));
    EXPECT_EQ(head.result(), get.result());
    EXPECT_TRUE(head.body().empty());
    EXPECT_EQ(head[http::field::content_type], get[http::field::content_type]);
    if (std::string_view(target) != "/metrics") {  // the request counters move between the two
      EXPECT_EQ(head[http::field::content_length], std::to_string(get.body().size()));
    }
  }
  start_drain(status);
  const auto get = answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  const auto head = answer_to(status, counts, make_request(http::verb::head, "/readyz"));
  EXPECT_EQ(head.result(), http::status::service_unavailable);
  EXPECT_TRUE(head.body().empty());
  EXPECT_EQ(head[http::field::content_length], std::to_string(get.body().size()));
}

TEST_F(HandleRequest, LivezAndHealthzAlwaysOk) {
  auto status = ready_status();
  start_drain(status);
  shim_status not_ready;
  for (auto* s : {&status, &not_ready}) {
    for (const auto* target : {"/livez", "/healthz", "/livez?verbose"}) {
      SCOPED_TRACE(target);
      const auto response = answer_to(*s, counts, make_request(http::verb::get, target));
      EXPECT_EQ(response.result(), http::status::ok);
      EXPECT_EQ(response.body(), "ok");
      expect_plain_text_headers(response);
    }
  }
}

TEST_F(HandleRequest, UnknownPathIs404) {
  auto status = ready_status();
  for (const auto* target : {"/", "/readyz/", "/ready", "/readyzz", "/metrics/x", "*"}) {
    SCOPED_TRACE(target);
    const auto response = answer_to(status, counts, make_request(http::verb::get, target));
    EXPECT_EQ(response.result(), http::status::not_found);
    expect_plain_text_headers(response);
  }
  const auto head = answer_to(status, counts, make_request(http::verb::head, "/nope"));
  EXPECT_EQ(head.result(), http::status::not_found);
  EXPECT_TRUE(head.body().empty());
  // An unknown path is 404 whatever the method.
  EXPECT_EQ(answer_to(status, counts, make_request(http::verb::post, "/nope")).result(),
            http::status::not_found);
}

TEST_F(HandleRequest, OtherMethodsAre405WithAllow) {
  auto status = ready_status();
  for (const auto* target : {"/readyz", "/livez", "/healthz", "/metrics", "/readyz?verbose"}) {
    for (auto method : {http::verb::post, http::verb::put, http::verb::delete_, http::verb::options,
                        http::verb::patch}) {
      SCOPED_TRACE(std::string(http::to_string(method)) + " " + target);
      const auto response = answer_to(status, counts, make_request(method, target));
      EXPECT_EQ(response.result(), http::status::method_not_allowed);
      EXPECT_EQ(response[http::field::allow], "GET, HEAD");
      expect_plain_text_headers(response);
    }
  }
}

TEST_F(HandleRequest, HonoursKeepAliveAndVersion) {
  auto status = ready_status();
  auto response = answer_to(status, counts, make_request(http::verb::get, "/readyz", 10));
  EXPECT_EQ(response.version(), 10u);
  EXPECT_FALSE(response.keep_alive());
  EXPECT_TRUE(response.need_eof());

  auto request = make_request(http::verb::get, "/readyz", 10);
  request.keep_alive(true);
  response = answer_to(status, counts, request);
  EXPECT_EQ(response.version(), 10u);
  EXPECT_TRUE(response.keep_alive());
  EXPECT_FALSE(response.need_eof());

  request = make_request(http::verb::get, "/readyz", 11);
  request.keep_alive(false);
  response = answer_to(status, counts, request);
  EXPECT_EQ(response.version(), 11u);
  EXPECT_FALSE(response.keep_alive());
}

TEST_F(HandleRequest, CountsResponsesByCode) {
  auto status = ready_status();
  answer_to(status, counts, make_request(http::verb::get, "/readyz"));
  answer_to(status, counts, make_request(http::verb::get, "/livez"));
  answer_to(status, counts, make_request(http::verb::get, "/nope"));
  answer_to(status, counts, make_request(http::verb::post, "/readyz"));
  start_drain(status);
  answer_to(status, counts, make_request(http::verb::head, "/readyz"));
  using h = http_handler;
  http_request_counts expected;
  expected.add(h::readyz, 200);
  expected.add(h::livez, 200);
  expected.add(h::other, 404);
  expected.add(h::readyz, 405);
  expected.add(h::readyz, 503);
  EXPECT_EQ(counts, expected);
  EXPECT_EQ(counts.count(200), 2u);
  std::string refusal;
  append_refusal(http::status::request_header_fields_too_large, counts, refusal);
  EXPECT_EQ(counts.count(h::other, 431), 1u) << "refused before routing: handler other";
}

}  // namespace
}  // namespace shim::readiness_test
