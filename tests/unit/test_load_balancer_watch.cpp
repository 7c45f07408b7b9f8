// load_balancer_watch: a drill's or a hold's figures start from their own baseline and stay as
// they were when it ended (issue 35, items 6 and 8).
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <list>
#include <string>
#include <thread>

#include "lb/load_balancer_watch.hpp"
#include "log/logger.hpp"
#include "log_test_support.hpp"

namespace shim {
namespace {

using boost::asio::ip::tcp;
using namespace std::chrono_literals;

std::string field(const log_fields& fields, const std::string& name) {
  for (const auto& [key, value] : fields) {
    if (key == name) return value;
  }
  return "(none)";
}

class LoadBalancerWatch : public ::testing::Test {
 protected:
  boost::asio::io_context io_;
  test::captured_output out_;
  logger log_{log_format::text, out_.fd(), false};
};

// A checker's answers after the drill ended changed its figures: a 3 s drill's JSON said fell_ms
// 4506 and fallen 1 while its summary, written at the end, said none fell.
TEST_F(LoadBalancerWatch, AFinishedDrillsFiguresStayAsTheyEnded) {
  load_balancer_watch watch(io_, 0, log_);
  const auto checker = boost::asio::ip::make_address("10.0.0.7");
  for (int i = 0; i < 3; ++i) {
    watch.probe_answered(checker, true);
    std::this_thread::sleep_for(2ms);
  }
  watch.begin(load_balancer_watch::clock::now(), 1);
  watch.end();
  const auto summary = watch.summary(10s);
  const auto fields = watch.fields(10s);
  ASSERT_NE(summary, "");
  watch.probe_answered(checker, false);
  watch.probe_answered(checker, false);
  EXPECT_EQ(watch.summary(10s), summary);
  EXPECT_EQ(watch.fields(10s), fields);
  EXPECT_TRUE(watch.has_checkers());
}

// 400 connections opened between two drills were the second drill's "new connections: 400 0 0".
TEST_F(LoadBalancerWatch, ASecondDrillsFirstSampleIsItsBaseline) {
  tcp::acceptor target(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  std::list<tcp::socket> clients;
  load_balancer_watch watch(io_, target.local_endpoint().port(), log_);
  // A drill of one baseline and one sample.
  const auto drill = [&] {
    watch.begin(load_balancer_watch::clock::now(), 3);
    io_.restart();
    io_.run_for(load_balancer_watch::kSampleInterval + 500ms);
    watch.end();
    return watch.fields(10s);
  };
  const auto first = drill();
  EXPECT_EQ(field(first, "lb_connection_samples"), "1");
  EXPECT_EQ(field(first, "lb_new_connections"), "0");
  for (int i = 0; i < 40; ++i) clients.emplace_back(io_).connect(target.local_endpoint());
  const auto second = drill();
  EXPECT_EQ(field(second, "lb_connection_samples"), "1");
  EXPECT_EQ(field(second, "lb_new_connections"), "0")
      << "connections opened between the drills counted as new in the second";
}

}  // namespace
}  // namespace shim
