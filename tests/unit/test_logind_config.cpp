#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "logind/logind_config.hpp"
#include "util/atomic_file.hpp"

namespace shim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::HasSubstr;

constexpr std::uint64_t kSec = 1'000'000;

class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "shim-logind-conf.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

std::string read(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fake machine: etc/systemd (main file + drop-ins), run and usr/lib drop-in directories.
struct fake_root {
  temp_dir dir;
  logind_conf_paths paths;
  fake_root() {
    const auto etc = dir.path() / "etc/systemd/logind.conf.d";
    paths = logind_conf_paths::for_conf_dir(etc);
    paths.dropin_dirs = {etc, dir.path() / "run/systemd/logind.conf.d",
                         dir.path() / "usr/lib/systemd/logind.conf.d"};
  }
  fs::path etc(const std::string& name) const { return paths.dropin_dirs[0] / name; }
  fs::path run(const std::string& name) const { return paths.dropin_dirs[1] / name; }
  fs::path usr(const std::string& name) const { return paths.dropin_dirs[2] / name; }
};

std::string login(const std::string& value) {
  return "[Login]\nInhibitDelayMaxSec=" + value + "\n";
}

// --- time spans ----------------------------------------------------------------------------------

TEST(ParseLogindTimespan, AcceptsWhatLogindAccepts) {
  const std::pair<const char*, std::uint64_t> cases[] = {
      {"30", 30 * kSec},       {"30s", 30 * kSec},
      {" 30s ", 30 * kSec},    {"0", 0},
      {"5min", 300 * kSec},    {"5m", 300 * kSec},
      {"1min 30s", 90 * kSec}, {"1min30s", 90 * kSec},
      {"2 min", 120 * kSec},   {"1.5h", 5400 * kSec},
      {"1h", 3600 * kSec},     {"2hours", 7200 * kSec},
      {"500ms", 500'000},      {"500msec", 500'000},
      {"250us", 250},          {"1d", 86400 * kSec},
      {"1w", 604800 * kSec},   {"2.5s", 2'500'000},
      {"150", 150 * kSec},     {"infinity", kInfinityUsec},
  };
  for (const auto& [text, usec] : cases) {
    EXPECT_EQ(parse_logind_timespan(text), usec) << text;
  }
}

TEST(ParseLogindTimespan, RefusesTheRest) {
  for (const char* text : {"", " ", "abc", "5x", "-5", "5 minutesx", "s", "infinite", "1e3",
                           "99999999999999999999", "1,5s", "5s-"}) {
    EXPECT_FALSE(parse_logind_timespan(text)) << '"' << text << '"';
  }
}

// systemd's own cases for parse_sec() and parse_time(.., USEC_PER_SEC): test_parse_sec and
// test_parse_time in src/test/test-time-util.c (systemd/systemd; the same cases in v252). Every
// row was also checked against Debian 12's systemd 252.39 (`systemd-analyze timespan`).
constexpr std::uint64_t kMsec = 1'000;
constexpr std::uint64_t kYear = 31'557'600 * kSec;

TEST(ParseLogindTimespan, SystemdTestTimeUtilAccepts) {
  const std::pair<const char*, std::uint64_t> cases[] = {
      {"5s", 5 * kSec},
      {"5s500ms", 5 * kSec + 500 * kMsec},
      {" 5s 500ms  ", 5 * kSec + 500 * kMsec},
      {" 5.5s  ", 5 * kSec + 500 * kMsec},
      {" 5.5s 0.5ms ", 5 * kSec + 500 * kMsec + 500},
      {" .22s ", 220 * kMsec},
      {" .50y ", kYear / 2},
      {"2.5", 2500 * kMsec},
      {".7", 700 * kMsec},
      {"23us", 23},
      {"23\xc2\xb5s", 23},  // U+00B5 MICRO SIGN
      {"23\xce\xbcs", 23},  // U+03BC GREEK SMALL LETTER MU
      {"infinity", kInfinityUsec},
      {" infinity ", kInfinityUsec},
      {"+3.1s", 3100 * kMsec},
      {"3.1s.2", 3300 * kMsec},
      {"3.1 .2", 3300 * kMsec},
      {"3.1 sec .2 sec", 3300 * kMsec},
      {"3.1 sec 1.2 sec", 4300 * kMsec},
      {"5", 5 * kSec},                       // test_parse_time
      {"1.1111111111111y", 35063999999997},  // test_parse_time: digits below 1 µs count 0
  };
  for (const auto& [text, usec] : cases) {
    EXPECT_EQ(parse_logind_timespan(text), usec) << '"' << text << '"';
  }
}

TEST(ParseLogindTimespan, SystemdTestTimeUtilRefuses) {
  for (const char* text :
       {" xyz ",       "",         " . ",
        " 5. ",        ".s ",      "-5s ",
        "-0.3s ",      "-0.0s ",   "-0.-0s ",
        "0.-0s ",      "3.-0s ",   " infinity .7",
        ".3 infinity", "3.+1s",    "3. 1s",
        "3.s",         "12.34.56", "12..34",
        "..1234",      "1234..",   "11111111111111y" /* test_parse_time: -ERANGE */}) {
    EXPECT_FALSE(parse_logind_timespan(text)) << '"' << text << '"';
  }
}

// Issue 8, item 9: a double for the fraction and an overflow rule of its own. "18446744073709.8"
// wrapped to 0.25 s, systemd's limit was accepted, and "3.", "12.34.56", "0..0" were taken.
// Values here are systemd-analyze's on systemd 252.39.
TEST(ParseLogindTimespan, SameLimitsAsSystemd252) {
  for (const char* text :
       {"18446744073709.8", "584542y", "3.", "12.34.56", "0..0", "18446744073709",
        "9223372036854775808us", "18446744073709551615us", "infinity5", "5 x", "5\v"}) {
    EXPECT_FALSE(parse_logind_timespan(text)) << '"' << text << '"';
  }
  const std::pair<std::string, std::uint64_t> cases[] = {
      {"584541y", 18446711061600000000u},
      {"18446744073708", 18446744073708000000u},  // the most whole seconds it takes
      {"9223372036854775807us", 9223372036854775807u},
      {"472.5s", 472'500'000},
      {"1min30s", 90 * kSec},
      {"5 5", 10 * kSec},
      // strtoll() skips \v and \f and takes a sign; only a leading '-' is refused before it.
      {"\v5", 5 * kSec},
      {"\v-0", 0},
      // A C string: logind never sees past a NUL.
      {std::string("7\0 garbage", 10), 7 * kSec},
  };
  for (const auto& [text, usec] : cases) {
    EXPECT_EQ(parse_logind_timespan(text), usec) << '"' << text << '"';
  }
}

TEST(DescribeUsec, ReadsLikeTheFlags) {
  EXPECT_EQ(describe_usec(149 * kSec), "2m29s");
  EXPECT_EQ(describe_usec(5 * kSec), "5s");
  EXPECT_EQ(describe_usec(472'500'000), "7m52.5s");
  EXPECT_EQ(describe_usec(kInfinityUsec), "infinity");
}

// Issue 8, item 9: it went through nanoseconds, which overflow for about 292 years or more.
TEST(DescribeUsec, EveryValueUpToInfinity) {
  EXPECT_EQ(describe_usec(292 * kYear), "2559672h0m0s");
  EXPECT_EQ(describe_usec(18446711061600000000u), "5124086406h0m0s");
  EXPECT_EQ(describe_usec(kInfinityUsec - 1), "5124095576h1m49.551614s");
}

// --- reading the files ---------------------------------------------------------------------------

TEST(InhibitDelaySettings, OnlyTheLoginSectionCountsAndTheLastWins) {
  const auto settings = inhibit_delay_settings("f.conf",
                                               "# InhibitDelayMaxSec=1\n"
                                               "[Other]\n"
                                               "InhibitDelayMaxSec=2\n"
                                               "[Login]\n"
                                               "; InhibitDelayMaxSec=3\n"
                                               "  InhibitDelayMaxSec = 30s \n"
                                               "KillUserProcesses=no\n"
                                               "InhibitDelayMaxSec=bogus\n");
  ASSERT_EQ(settings.size(), 2u);
  EXPECT_EQ(settings[0].text, "30s");
  EXPECT_EQ(settings[0].usec, 30 * kSec);
  EXPECT_EQ(settings[1].text, "bogus");
  EXPECT_FALSE(settings[1].usec);
  EXPECT_EQ(settings[1].file, "f.conf");
}

// systemd's read_line() ends a line at \n, \r or NUL. Split at \n only, a NUL ended the value
// (parse_sec reads a C string): "5" where logind reads 600 on the next line, and the plan would
// then lower logind's 600 (the same class as issue 18, item 3).
TEST(InhibitDelaySettings, LinesEndAtNewlineCarriageReturnOrNulAsLogindReadsThem) {
  using namespace std::string_literals;
  for (const auto& text : {"[Login]\nInhibitDelayMaxSec=5\0InhibitDelayMaxSec=600\n"s,
                           "[Login]\rInhibitDelayMaxSec=5\rInhibitDelayMaxSec=600"s,
                           "[Login]\r\nInhibitDelayMaxSec=5\r\nInhibitDelayMaxSec=600\r\n"s}) {
    const auto settings = inhibit_delay_settings("f.conf", text);
    ASSERT_EQ(settings.size(), 2u) << text;
    EXPECT_EQ(settings.back().usec, 600 * kSec) << text;
  }
}

TEST(ScanLogindConf, MainFileFirstThenDropinsByNameWithMasking) {
  fake_root root;
  write(root.paths.main_file, login("10"));
  write(root.usr("50-vendor.conf"), login("20"));
  write(root.etc("50-vendor.conf"), login("21"));  // masks the /usr/lib one
  write(root.run("40-runtime.conf"), login("40"));
  write(root.usr("99-kubelet.conf"), login("60"));
  write(root.etc("ignored.txt"), login("999"));
  write(root.etc(".hidden.conf"), login("998"));
  const auto scan = scan_logind_conf(root.paths);
  EXPECT_TRUE(scan.errors.empty());
  ASSERT_EQ(scan.settings.size(), 4u);
  EXPECT_EQ(scan.settings[0].file, root.paths.main_file);
  EXPECT_EQ(scan.settings[1].file, root.run("40-runtime.conf"));
  EXPECT_EQ(scan.settings[2].file, root.etc("50-vendor.conf"));
  EXPECT_EQ(scan.settings[3].file, root.usr("99-kubelet.conf"));
  EXPECT_EQ(scan.settings[3].usec, 60 * kSec);
}

TEST(ScanLogindConf, MissingDirectoriesAreEmpty) {
  fake_root root;
  const auto scan = scan_logind_conf(root.paths);
  EXPECT_TRUE(scan.errors.empty());
  EXPECT_TRUE(scan.settings.empty());
}

TEST(ScanLogindConf, AnUnreadableFileIsAnError) {
  fake_root root;
  fs::create_directories(root.etc("broken.conf"));  // a directory named *.conf: read fails
  const auto scan = scan_logind_conf(root.paths);
  ASSERT_EQ(scan.errors.size(), 1u);
  EXPECT_THAT(scan.errors[0], HasSubstr("broken.conf"));
}

// --- the plan ------------------------------------------------------------------------------------

TEST(InhibitDelayMargin, TenPercentAtLeastFiveSeconds) {
  EXPECT_EQ(inhibit_delay_margin(135s), 14s);
  EXPECT_EQ(inhibit_delay_margin(8s), 5s);
  EXPECT_EQ(inhibit_delay_margin(0s), 5s);
  EXPECT_EQ(inhibit_delay_margin(1000s), 100s);
}

TEST(PlanInhibitDelay, WritesHoldPlusMarginWhenNothingElseIsSet) {
  fake_root root;
  write(root.paths.main_file, "[Login]\n#InhibitDelayMaxSec=5\n");
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.needed_usec, 149 * kSec);
  EXPECT_EQ(plan.write_usec, 149 * kSec);
  EXPECT_EQ(plan.effective_usec, 149 * kSec);
  EXPECT_EQ(plan.write_text, "149");
  EXPECT_THAT(plan.file_text, HasSubstr("\n[Login]\nInhibitDelayMaxSec=149\n"));
  EXPECT_THAT(plan.file_text, HasSubstr("# Written by shutdown-shim --ensure-inhibit-delay"));
  EXPECT_EQ(inhibit_delay_settings("x", plan.file_text).size(), 1u) << "comments must not count";
}

TEST(PlanInhibitDelay, NeverLowersAValueSetElsewhere) {
  fake_root root;
  write(root.paths.main_file, login("5"));
  write(root.usr("10-someone.conf"), login("10min"));  // sorts first: not in effect, still kept
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.write_usec, 600 * kSec);
  EXPECT_EQ(plan.effective_usec, 600 * kSec);
  EXPECT_THAT(plan.file_text, HasSubstr("InhibitDelayMaxSec=600\n"));
}

// Issue 8, item 9: the drop-in holds whole seconds, and 472.5s elsewhere made the shim write 472.
TEST(PlanInhibitDelay, RoundsUpNeverDown) {
  fake_root root;
  write(root.etc("10-longer.conf"), login("472.5s"));
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.write_text, "473");
  EXPECT_EQ(plan.write_usec, 473 * kSec);
  EXPECT_EQ(plan.effective_usec, 473 * kSec);
  EXPECT_THAT(plan.file_text, HasSubstr("InhibitDelayMaxSec=473\n"));

  write(root.etc("10-longer.conf"), login("472s 1us"));
  EXPECT_EQ(plan_inhibit_delay(root.paths, 135s).value().write_text, "473");
  write(root.etc("10-longer.conf"), login("472s"));
  EXPECT_EQ(plan_inhibit_delay(root.paths, 135s).value().write_text, "472");
}

TEST(PlanInhibitDelay, ValuesNearInfinity) {
  fake_root root;
  // The most whole seconds systemd takes, and one more microsecond: only "infinity" is as long.
  write(root.etc("10-long.conf"), login("18446744073708"));
  EXPECT_EQ(plan_inhibit_delay(root.paths, 10s).value().write_text, "18446744073708");
  write(root.etc("10-long.conf"), login("18446744073708s 1us"));
  const auto plan_planned = plan_inhibit_delay(root.paths, 10s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.write_usec, kInfinityUsec);
  EXPECT_EQ(plan.write_text, "infinity");
  write(root.etc("10-long.conf"), login("584541y"));
  EXPECT_EQ(plan_inhibit_delay(root.paths, 10s).value().write_text, "18446711061600");
}

TEST(PlanInhibitDelay, TheLongestHoldDoesNotOverflow) {
  fake_root root;
  const auto longest = std::chrono::nanoseconds::max();
  const auto plan_planned = plan_inhibit_delay(root.paths, longest);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  // ceil(9223372036.854775807 s) + 10 % of it = 9223372037 + 922337204 seconds.
  EXPECT_EQ(plan.needed_usec, 10145709241 * kSec);
  EXPECT_EQ(plan.write_text, "10145709241");
  EXPECT_EQ(inhibit_delay_margin(longest), 922337204s);
}

TEST(PlanInhibitDelay, InfinityElsewhereIsWrittenAsInfinity) {
  fake_root root;
  write(root.etc("10-forever.conf"), login("infinity"));
  const auto plan_planned = plan_inhibit_delay(root.paths, 10s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.write_usec, kInfinityUsec);
  EXPECT_THAT(plan.file_text, HasSubstr("InhibitDelayMaxSec=infinity\n"));

  // A later drop-in with infinity is in effect and more than enough.
  write(root.etc("zzz-later.conf"), login("infinity"));
  const auto later_planned = plan_inhibit_delay(root.paths, 10s);
  ASSERT_TRUE(later_planned) << later_planned.error();
  const auto& later = later_planned.value();
  EXPECT_EQ(later.effective_usec, kInfinityUsec);
}

TEST(PlanInhibitDelay, OurOwnOldFileAndTheMaskedVendorCopyDoNotCount) {
  fake_root root;
  write(root.etc(std::string(kShimDropinName)), login("1000"));  // ours, from a longer hold once
  write(root.usr(std::string(kShimDropinName)), login("900"));   // the vendor copy, masked
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_EQ(plan.write_usec, 149 * kSec);
}

TEST(PlanInhibitDelay, OurVendorCopyCuttingKubeletsLargerValueIsFlagged) {
  fake_root root;
  write(root.usr(std::string(kShimDropinName)), login("150"));  // as installed
  EXPECT_FALSE(plan_inhibit_delay(root.paths, 135s).value().shim_dropin_lowers)
      << "nothing to lower";

  // kubelet's shutdownGracePeriod=300s; its file sorts before ours, so logind applies our 150.
  write(root.etc("99-kubelet.conf"),
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=300\n");
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_TRUE(plan.shim_dropin_lowers);
  EXPECT_EQ(plan.write_usec, 300 * kSec);
  EXPECT_EQ(plan.effective_usec, 300 * kSec);

  // Once the /etc copy says 300, nothing is lowered any more.
  write(root.etc(std::string(kShimDropinName)), plan.file_text);
  EXPECT_FALSE(plan_inhibit_delay(root.paths, 135s).value().shim_dropin_lowers);
}

TEST(PlanInhibitDelay, OnlyOurOwnFileCountsAsLowering) {
  fake_root root;
  write(root.usr(std::string(kShimDropinName)), login("150"));
  write(root.etc("99-kubelet.conf"), login("100"));  // smaller than ours: nothing is lowered
  EXPECT_FALSE(plan_inhibit_delay(root.paths, 135s).value().shim_dropin_lowers);

  // Someone else's later file has the last word: writing ours would change nothing.
  write(root.etc("99-kubelet.conf"), login("300"));
  write(root.etc("zzz-late.conf"), login("140"));
  const auto plan_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(plan_planned) << plan_planned.error();
  const auto& plan = plan_planned.value();
  EXPECT_FALSE(plan.shim_dropin_lowers);
}

TEST(PlanInhibitDelay, AnUnparsableValueIsReportedNotGuessed) {
  fake_root root;
  write(root.etc("50-typo.conf"), login("2 minuts"));
  const auto plan = plan_inhibit_delay(root.paths, 135s);
  ASSERT_FALSE(plan.ok()) << "nothing to write";
  EXPECT_THAT(plan.error(), HasSubstr("50-typo.conf"));
  EXPECT_THAT(plan.error(), HasSubstr("InhibitDelayMaxSec=2 minuts"));
}

TEST(PlanInhibitDelay, ALaterDropinThatWouldOverrideIsReported) {
  fake_root root;
  write(root.etc("zzz-late.conf"), login("30"));
  const auto plan = plan_inhibit_delay(root.paths, 135s);
  ASSERT_FALSE(plan.ok()) << "nothing to write";
  EXPECT_THAT(plan.error(), HasSubstr("zzz-late.conf"));
  EXPECT_THAT(plan.error(), HasSubstr("sorts after zz-shutdown-shim.conf"));

  // A later file with enough is fine: logind then uses its value.
  write(root.etc("zzz-late.conf"), login("140"));
  const auto ok_planned = plan_inhibit_delay(root.paths, 135s);
  ASSERT_TRUE(ok_planned) << ok_planned.error();
  const auto& ok = ok_planned.value();
  EXPECT_EQ(ok.write_usec, 149 * kSec);
  EXPECT_EQ(ok.effective_usec, 140 * kSec);
}

// --- writing -------------------------------------------------------------------------------------

TEST(WriteFileAtomically, CreatesTheDirectoryAndReplacesTheFile0644) {
  temp_dir dir;
  const auto file = dir.path() / "a/b/logind.conf.d" / std::string(kShimDropinName);
  const mode_t old_umask = ::umask(077);
  write_file_atomically(file, "one\n");
  ::umask(old_umask);
  EXPECT_EQ(read(file), "one\n");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  write_file_atomically(file, "two\n");
  EXPECT_EQ(read(file), "two\n");
  // Nothing left behind but the file.
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(file.parent_path())) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST(WriteFileAtomically, AnImpossibleDirectoryThrowsWithThePath) {
  temp_dir dir;
  write(dir.path() / "not-a-dir", "x");
  const auto file = dir.path() / "not-a-dir/logind.conf.d/x.conf";
  try {
    write_file_atomically(file, "x");
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not-a-dir"));
  }
}

TEST(LogindConfPaths, DerivedFromTheConfDir) {
  const auto p = logind_conf_paths::for_conf_dir("/etc/systemd/logind.conf.d");
  EXPECT_EQ(p.main_file, "/etc/systemd/logind.conf");
  EXPECT_EQ(p.shim_dropin, "/etc/systemd/logind.conf.d/zz-shutdown-shim.conf");
  ASSERT_EQ(p.dropin_dirs.size(), 4u);
  EXPECT_EQ(p.dropin_dirs[0], "/etc/systemd/logind.conf.d");
  EXPECT_EQ(p.dropin_dirs[1], "/run/systemd/logind.conf.d");
  EXPECT_EQ(p.dropin_dirs[2], "/usr/local/lib/systemd/logind.conf.d");
  EXPECT_EQ(p.dropin_dirs[3], "/usr/lib/systemd/logind.conf.d");
}

}  // namespace
}  // namespace shim
