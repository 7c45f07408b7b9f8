// The sampler against the kernel's real socket table, on 127.0.0.1 and ::1: a listener on a free
// port, k connections, then none; connections to another port are not counted.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <list>
#include <optional>
#include <utility>

#include "lb/new_connection_sampler.hpp"

namespace shim {
namespace {

using boost::asio::ip::tcp;
using counts = new_connection_sampler::counts;

class NewConnectionSampler : public ::testing::Test {
 protected:
  tcp::acceptor listen_on(const char* address) {
    return tcp::acceptor(io_, tcp::endpoint(boost::asio::ip::make_address(address), 0));
  }
  void connect(const tcp::acceptor& to, int k) {
    for (int i = 0; i < k; ++i) clients_.emplace_back(io_).connect(to.local_endpoint());
  }
  // One sample, the loop run until it is in.
  counts sample(new_connection_sampler& s) {
    std::optional<result<counts>> got;
    s.sample([&](result<counts> r) { got.emplace(std::move(r)); });
    EXPECT_FALSE(got) << "the handler is called from the loop, never from sample()";
    io_.restart();
    while (!got && io_.run_one() > 0) {
    }
    EXPECT_TRUE(got);
    if (!got) return {};
    EXPECT_TRUE(got->ok()) << got->error();
    return got->ok() ? got->value() : counts{};
  }

  boost::asio::io_context io_;
  std::list<tcp::socket> clients_;
};

TEST_F(NewConnectionSampler, CountsNewConnectionsToItsPortOnly) {
  auto target = listen_on("127.0.0.1");
  auto other = listen_on("127.0.0.1");
  new_connection_sampler s(io_, target.local_endpoint().port());
  const counts baseline = sample(s);
  EXPECT_TRUE(baseline.first);
  EXPECT_EQ(baseline.open, 0u);

  connect(target, 5);
  connect(other, 3);
  const counts after = sample(s);
  EXPECT_FALSE(after.first);
  EXPECT_EQ(after.open, 5u) << "the server side of each (the client side has another local port)";
  EXPECT_EQ(after.fresh, 5u);
  EXPECT_FALSE(after.truncated);

  const counts quiet = sample(s);
  EXPECT_EQ(quiet.open, 5u);
  EXPECT_EQ(quiet.fresh, 0u);

  // Accepted or not makes no difference: the kernel's socket is there from the handshake on.
  tcp::socket accepted = target.accept();
  connect(target, 2);
  clients_.front().close();  // one old one goes
  const counts later = sample(s);
  EXPECT_EQ(later.fresh, 2u);
  EXPECT_EQ(later.open, 6u) << "5 + 2 - the one closed";
}

TEST_F(NewConnectionSampler, CountsIpv6AndIpv4InOneSample) {
  auto v6 = listen_on("::1");
  const auto port = v6.local_endpoint().port();
  tcp::acceptor v4(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  new_connection_sampler s(io_, port);
  sample(s);
  connect(v6, 2);
  connect(v4, 3);
  const counts c = sample(s);
  EXPECT_EQ(c.fresh, 5u);
  EXPECT_EQ(c.open, 5u);
}

TEST_F(NewConnectionSampler, OneSampleAtATime) {
  auto target = listen_on("127.0.0.1");
  new_connection_sampler s(io_, target.local_endpoint().port());
  std::optional<result<counts>> first, second;
  s.sample([&](result<counts> r) { first.emplace(std::move(r)); });
  s.sample([&](result<counts> r) { second.emplace(std::move(r)); });
  EXPECT_FALSE(second) << "refused later, from the loop";
  io_.run();
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(first->ok()) << first->error();
  ASSERT_FALSE(second->ok());
  EXPECT_EQ(second->error(), "sock_diag: a sample is already running");
}

TEST_F(NewConnectionSampler, DestroyedMidSampleCallsNothing) {
  auto target = listen_on("127.0.0.1");
  bool called = false;
  {
    new_connection_sampler s(io_, target.local_endpoint().port());
    s.sample([&](result<counts>) { called = true; });
  }
  io_.run();
  EXPECT_FALSE(called);
}

// Raises the soft limit on descriptors for n connections (both ends) and some more.
void allow_descriptors(rlim_t n) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < n) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, n);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  ASSERT_GE(files.rlim_cur, n) << "too few descriptors";
}

// One sample with other work always ready beside it: the turns of the loop it took (a turn runs
// one handler), and what it counted.
std::pair<int, result<counts>> sample_beside_other_work(boost::asio::io_context& io,
                                                        new_connection_sampler& s) {
  int turns = 0;
  bool done = false;
  std::function<void()> other = [&] {
    ++turns;
    if (!done) boost::asio::post(io, other);
  };
  boost::asio::post(io, other);
  std::optional<result<counts>> got;
  s.sample([&](result<counts> r) {
    got.emplace(std::move(r));
    done = true;
  });
  io.restart();
  io.run();
  if (!got) return {turns, result<counts>::failure("no answer")};
  return {turns, std::move(*got)};
}

// Issue 35, item 5: a sample read the whole dump in one handler run, so with 26.6k connections
// /readyz waited 153 ms behind it (p99). Now each datagram (about 370 sockets) is one run, and
// whatever else is ready runs between two of them.
TEST_F(NewConnectionSampler, TheLoopRunsOtherWorkBetweenTheDumpsDatagrams) {
  constexpr int kConnections = 1500;  // 1,500 sockets of the port: about 4 datagrams
  allow_descriptors(2 * kConnections + 100);
  tcp::acceptor target(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  target.listen(4096);  // not accepted: the backlog holds them all
  connect(target, kConnections);
  new_connection_sampler s(io_, target.local_endpoint().port());
  const auto [turns, got] = sample_beside_other_work(io_, s);
  ASSERT_TRUE(got.ok()) << got.error();
  EXPECT_EQ(got.value().open, static_cast<std::size_t>(kConnections));
  EXPECT_GE(turns, 4) << "the dump was read in " << turns << " turns of the loop";
}

// Issue 35, "sampling bounded": a sample reads at most max_sockets of the port, then abandons the
// dump (the next sample opens a new socket and is a first again); before, it read to the end.
TEST_F(NewConnectionSampler, ASampleStopsReadingAtItsLimit) {
  constexpr int kConnections = 1500;
  allow_descriptors(2 * kConnections + 100);
  tcp::acceptor target(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  target.listen(4096);
  connect(target, kConnections);
  const auto port = target.local_endpoint().port();
  new_connection_sampler whole(io_, port);
  const int whole_turns = sample_beside_other_work(io_, whole).first;

  new_connection_sampler capped(io_, port, 400);
  for (int i = 0; i < 2; ++i) {
    const auto [turns, got] = sample_beside_other_work(io_, capped);
    ASSERT_TRUE(got.ok()) << "sample " << i << ": " << got.error();
    EXPECT_TRUE(got.value().truncated);
    EXPECT_EQ(got.value().open, 400u);
    EXPECT_EQ(got.value().fresh, 0u);
    EXPECT_LT(turns, whole_turns) << "the capped sample read as much as the whole dump";
  }
  new_connection_sampler roomy(io_, port, 2000);
  const counts all = sample(roomy);
  EXPECT_FALSE(all.truncated);
  EXPECT_EQ(all.open, static_cast<std::size_t>(kConnections));
}

}  // namespace
}  // namespace shim
