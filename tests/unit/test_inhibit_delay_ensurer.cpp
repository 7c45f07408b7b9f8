// inhibit_delay_ensurer against fake bus calls, table-driven (as kubelet tests its inhibitor with a
// fake D-Bus): what it writes, when it reloads, what it reports.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "log_test_support.hpp"
#include "logind/inhibit_delay_ensurer.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::uint64_t kSec = 1'000'000;

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "ensurer-test.XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { fs::remove_all(path); }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ensure_case {
  std::string name = {};
  std::uint64_t current_usec = 0;
  std::optional<std::string> other_dropin = {};  // 50-other.conf's InhibitDelayMaxSec value
  std::optional<std::string> own_dropin = {};    // an earlier zz-shutdown-shim.conf's value
  std::string reload_error = {};                 // empty: KillUnit succeeds
  std::vector<std::optional<std::uint64_t>> rereads = {};  // nullopt: the read fails
  bool want_ok = false;
  std::string want_error_part = {};              // when !want_ok
  std::optional<std::string> want_written = {};  // InhibitDelayMaxSec= in our drop-in
  int want_reloads = 0;
};

class InhibitDelayEnsurer : public ::testing::TestWithParam<ensure_case> {};

TEST_P(InhibitDelayEnsurer, Case) {
  const ensure_case& c = GetParam();
  temp_dir dir;
  const fs::path conf_dir = dir.path / "etc-systemd" / "logind.conf.d";
  fs::create_directories(conf_dir);
  if (c.other_dropin) {
    std::ofstream(conf_dir / "50-other.conf")
        << "[Login]\nInhibitDelayMaxSec=" << *c.other_dropin << "\n";
  }
  if (c.own_dropin) {
    std::ofstream(conf_dir / kShimDropinName)
        << "[Login]\nInhibitDelayMaxSec=" << *c.own_dropin << "\n";
  }
  logind_settings cfg;
  cfg.drain_delay = 70s;
  cfg.exit_timeout = 65s;
  cfg.ensure_inhibit_delay = ensure_mode::best_effort;
  cfg.logind_conf_dir = conf_dir.string();

  boost::asio::io_context io;
  const test::captured_output log_output;
  logger log(log_format::text, log_output.fd(), false);
  event_recorder events(log, (dir.path / "events.jsonl").string());

  int reloads = 0;
  std::deque<std::optional<std::uint64_t>> rereads(c.rereads.begin(), c.rereads.end());
  std::optional<result<>> finished;
  std::vector<std::string> progress;
  inhibit_delay_ensurer ensurer(
      io, log, events, cfg,
      {.reload_logind =
           [&](std::function<void(result<>)> done) {
             ++reloads;
             boost::asio::post(io, [&c, done] {
               done(c.reload_error.empty() ? result<>::success()
                                           : result<>::failure(c.reload_error));
             });
           },
       .read_inhibit_delay =
           [&](std::function<void(result<std::uint64_t>)> done) {
             std::optional<std::uint64_t> next;
             if (!rereads.empty()) {
               next = rereads.front();
               rereads.pop_front();
             }
             boost::asio::post(io, [next, done] {
               done(next ? result<std::uint64_t>::success(*next)
                         : result<std::uint64_t>::failure("org.freedesktop.DBus.Error.NoReply"));
             });
           }},
      {.progress = [&](const std::string& text) { progress.push_back(text); },
       .finished = [&](const result<>& outcome) { finished = outcome; }});
  ensurer.start(c.current_usec);
  EXPECT_FALSE(finished) << "finished is called from the loop, never from inside start()";
  io.run_for(std::chrono::seconds(inhibit_delay_ensurer::kReloadBound) + 2s);

  ASSERT_TRUE(finished) << "finished is always called";
  EXPECT_EQ(finished->ok(), c.want_ok) << (finished->ok() ? "" : finished->error());
  if (!c.want_ok) {
    EXPECT_NE(finished->error().find(c.want_error_part), std::string::npos);
  }
  EXPECT_EQ(reloads, c.want_reloads);
  ASSERT_FALSE(progress.empty()) << "what it did shows in /readyz?verbose";
  const fs::path ours = conf_dir / kShimDropinName;
  if (c.want_written) {
    ASSERT_TRUE(fs::exists(ours));
    EXPECT_NE(read_file(ours).find("InhibitDelayMaxSec=" + *c.want_written + "\n"),
              std::string::npos)
        << read_file(ours);
  } else {
    EXPECT_FALSE(fs::exists(ours));
  }
}

// The hold is 70 s + 65 s = 135 s; with the margin (10 %, at least 5 s) the shim asks for 149 s.
INSTANTIATE_TEST_SUITE_P(
    Table, InhibitDelayEnsurer,
    ::testing::Values(ensure_case{.name = "LongEnoughAlready",
                                  .current_usec = 300 * kSec,
                                  .want_ok = true,
                                  .want_reloads = 0},
                      ensure_case{.name = "RaisesAndReloads",
                                  .current_usec = 5 * kSec,
                                  .rereads = {149 * kSec},
                                  .want_ok = true,
                                  .want_written = "149",
                                  .want_reloads = 1},
                      ensure_case{.name = "RereadsUntilLogindShowsIt",
                                  .current_usec = 5 * kSec,
                                  .rereads = {5 * kSec, std::nullopt, 5 * kSec, 149 * kSec},
                                  .want_ok = true,
                                  .want_written = "149",
                                  .want_reloads = 1},
                      ensure_case{.name = "NeverLowersALargerValue",
                                  .current_usec = 5 * kSec,
                                  .other_dropin = "10min",
                                  .rereads = {600 * kSec},
                                  .want_ok = true,
                                  .want_written = "600",
                                  .want_reloads = 1},
                      // Long enough for the hold, but the shim's own file (here an earlier
                      // /etc copy; on a node usually the vendor copy) sorts after kubelet's
                      // 99-kubelet.conf and cuts its larger value: write that value instead.
                      ensure_case{.name = "OwnDropinNeverLowersALargerValue",
                                  .current_usec = 149 * kSec,
                                  .other_dropin = "300",
                                  .own_dropin = "149",
                                  .rereads = {149 * kSec, 300 * kSec},
                                  .want_ok = true,
                                  .want_written = "300",
                                  .want_reloads = 1},
                      ensure_case{.name = "OwnDropinAtTheLargestValueIsLeftAlone",
                                  .current_usec = 300 * kSec,
                                  .other_dropin = "300",
                                  .own_dropin = "300",
                                  .want_ok = true,
                                  .want_written = "300",
                                  .want_reloads = 0},
                      ensure_case{.name = "KillUnitRefused",
                                  .current_usec = 5 * kSec,
                                  .reload_error = "org.freedesktop.DBus.Error.AccessDenied: denied",
                                  .want_ok = false,
                                  .want_error_part = "KillUnit",
                                  .want_written = "149",
                                  .want_reloads = 1},
                      ensure_case{.name = "LogindNeverShowsTheValue",
                                  .current_usec = 5 * kSec,
                                  .rereads = {},
                                  .want_ok = false,
                                  .want_error_part = "did not show",
                                  .want_written = "149",
                                  .want_reloads = 1},
                      ensure_case{.name = "AValueItCannotReadIsNeverOverwritten",
                                  .current_usec = 5 * kSec,
                                  .other_dropin = "soon",
                                  .want_ok = false,
                                  .want_error_part = "cannot tell",
                                  .want_reloads = 0}),
    [](const ::testing::TestParamInfo<ensure_case>& info) { return info.param.name; });

}  // namespace
}  // namespace shim
