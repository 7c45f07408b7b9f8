#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/subcommand.hpp"
#include "config/config.hpp"
#include "util/duration_text.hpp"
#include "util/signal_names.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::StartsWith;

config parse(std::initializer_list<std::string_view> args) {
  const std::vector<std::string_view> v(args);
  return parse_flags(v);
}

// The usage_error message for args, or a test failure when they parse.
std::string usage_message(std::initializer_list<std::string_view> args) {
  try {
    parse(args);
  } catch (const usage_error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << "no usage_error";
  return {};
}

std::string duration_error(std::string_view text) {
  try {
    parse_duration(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "\"" << text << "\" parsed";
  return {};
}

// --- durations -----------------------------------------------------------------------------------

struct duration_case {
  std::string_view text;
  nanoseconds want;
};

TEST(ParseDuration, AcceptsGoSyntax) {
  const duration_case cases[] = {
      {"0", 0ns},
      {"+0", 0ns},
      {"-0", 0ns},
      {"0s", 0ns},
      {"0h", 0ns},
      {"70s", 70s},
      {"+70s", 70s},
      {"1m30s", 90s},
      {"250ms", 250ms},
      {"1.5h", 90min},
      {"2h45m", 2h + 45min},
      {"1h2m3.5s", 1h + 2min + 3500ms},
      {"1ns", 1ns},
      {"1us", 1us},
      {"1\xc2\xb5s", 1us},  // U+00B5 MICRO SIGN
      {"1\xce\xbcs", 1us},  // U+03BC GREEK SMALL LETTER MU
      {"1ms", 1ms},
      {"1s", 1s},
      {"1m", 1min},
      {"1h", 1h},
      {"5.0s", 5s},
      {"5.s", 5s},
      {".5s", 500ms},
      {"1.004s", 1004ms},
      {"1.0040s", 1004ms},
      {"100.00100s", 100001ms},
      {"0.1ns", 0ns},
      {"1.1ns", 1ns},
      {"2.5us", 2500ns},
      {"0.3333333333333333333h", 20min},  // excess fraction digits are dropped, like Go
      {"1s1s", 2s},
      {"3h30m1s2ms3us4ns", 3h + 30min + 1s + 2ms + 3us + 4ns},
      {"9223372036854775807ns", nanoseconds(std::numeric_limits<std::int64_t>::max())},
      {"9223372036.854775807s", nanoseconds(std::numeric_limits<std::int64_t>::max())},
      {"2562047h47m16.854775807s", nanoseconds(std::numeric_limits<std::int64_t>::max())},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(parse_duration(c.text), c.want) << c.text;
  }
}

TEST(ParseDuration, RefusesBadSyntax) {
  const std::string_view cases[] = {
      "",     "1",    "70",   "-",   "+",   ".",     ".s",     "s",    "x",
      "7x",   "1S",   "1sec", "1 s", " 1s", "1s ",   "1.2.3s", "1m30", "1e3s",
      "--1s", "-+1s", "1d",   "1w",  "ms",  "1m-1s", "0x1s",   "1,5s", "\xc2\xb5s",
  };
  for (const auto text : cases) {
    EXPECT_THAT(duration_error(text), StartsWith("invalid duration")) << "\"" << text << "\"";
  }
  EXPECT_THAT(duration_error("1"), HasSubstr("missing unit"));
  EXPECT_THAT(duration_error("7x"), HasSubstr("unknown unit \"x\""));
  EXPECT_THAT(duration_error(""), HasSubstr("empty"));
}

TEST(ParseDuration, RefusesNegative) {
  for (const auto text : {"-1s", "-1ns", "-0.5s", "-1m30s"}) {
    EXPECT_THAT(duration_error(text), StartsWith("negative duration")) << text;
  }
}

TEST(ParseDuration, RefusesOverflow) {
  for (const auto text : {"9223372036854775808ns", "9223372036.854775808s", "2562048h",
                          "2562047h47m17s", "99999999999999999999999s", "1000000000000000000000h",
                          "2562047h2562047h", "18446744073709551616ns"}) {
    EXPECT_THAT(duration_error(text), HasSubstr("out of range")) << text;
  }
}

TEST(FormatDuration, RendersLikeGo) {
  EXPECT_EQ(format_duration(0ns), "0s");
  EXPECT_EQ(format_duration(1ns), "1ns");
  EXPECT_EQ(format_duration(1100ns), "1.1\xc2\xb5s");
  EXPECT_EQ(format_duration(2200us), "2.2ms");
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(70s), "1m10s");
  EXPECT_EQ(format_duration(65s), "1m5s");
  EXPECT_EQ(format_duration(1h), "1h0m0s");
  EXPECT_EQ(format_duration(1h + 2min + 3500ms), "1h2m3.5s");
  EXPECT_EQ(format_duration(nanoseconds(4'000'000'001)), "4.000000001s");
  EXPECT_EQ(format_duration(-1500ms), "-1.5s");
  EXPECT_EQ(format_duration(-1ns), "-1ns");
  EXPECT_EQ(format_duration(nanoseconds(std::numeric_limits<std::int64_t>::max())),
            "2562047h47m16.854775807s");
  EXPECT_EQ(format_duration(nanoseconds(std::numeric_limits<std::int64_t>::min())),
            "-2562047h47m16.854775808s");
}

TEST(FormatDuration, RoundTripsThroughParse) {
  const nanoseconds values[] = {
      0ns,
      1ns,
      999ns,
      1us,
      1001ns,
      250ms,
      999999999ns,
      1s,
      70s,
      65s,
      90min,
      1h + 2min + 3500ms,
      100h,
      nanoseconds(std::numeric_limits<std::int64_t>::max()),
      nanoseconds(123456789012345),
  };
  for (const auto d : values) {
    EXPECT_EQ(parse_duration(format_duration(d)), d) << format_duration(d);
  }
  for (const auto text : {"1m10s", "250ms", "1.5s", "1h2m3.5s", "0s", "2h45m0s", "1.1\xc2\xb5s"}) {
    EXPECT_EQ(format_duration(parse_duration(text)), text);
  }
}

// Issue 8, item 9: describe_usec went through nanoseconds, which overflow for logind values of
// about 292 years or more. format_usec renders every uint64 microsecond value.
TEST(FormatUsec, RendersEveryValueLikeGo) {
  EXPECT_EQ(format_usec(0), "0s");
  EXPECT_EQ(format_usec(1), "1\xc2\xb5s");
  EXPECT_EQ(format_usec(999), "999\xc2\xb5s");
  EXPECT_EQ(format_usec(1500), "1.5ms");
  EXPECT_EQ(format_usec(250'000), "250ms");
  EXPECT_EQ(format_usec(472'500'000), "7m52.5s");
  EXPECT_EQ(format_usec(3'600'000'001), "1h0m0.000001s");
  // 292 years and more: past what int64 nanoseconds hold.
  EXPECT_EQ(format_usec(9'223'372'036'854'776), "2562047h47m16.854776s");
  EXPECT_EQ(format_usec(std::numeric_limits<std::uint64_t>::max()), "5124095576h1m49.551615s");
  for (const std::uint64_t usec : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{999'999},
                                   std::uint64_t{1'000'000}, std::uint64_t{86'400'000'000}}) {
    EXPECT_EQ(format_usec(usec), format_duration(std::chrono::microseconds(usec))) << usec;
  }
}

// --- signals -------------------------------------------------------------------------------------

TEST(ParseSignal, AcceptsNamesAndNumbers) {
  for (const auto text : {"TERM", "SIGTERM", "sigterm", "term", "SigTerm", "15", "015"}) {
    EXPECT_EQ(parse_signal(text), SIGTERM) << text;
  }
  EXPECT_EQ(parse_signal("INT"), SIGINT);
  EXPECT_EQ(parse_signal("HUP"), SIGHUP);
  EXPECT_EQ(parse_signal("QUIT"), SIGQUIT);
  EXPECT_EQ(parse_signal("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(parse_signal("KILL"), SIGKILL);
  EXPECT_EQ(parse_signal("WINCH"), SIGWINCH);
  EXPECT_EQ(parse_signal("IOT"), SIGABRT);
  EXPECT_EQ(parse_signal("POLL"), SIGIO);
  EXPECT_EQ(parse_signal("CLD"), SIGCHLD);
  EXPECT_EQ(parse_signal("1"), 1);
  EXPECT_EQ(parse_signal("64"), 64);
}

TEST(ParseSignal, RefusesUnknown) {
  for (const auto text : {"", "0", "65", "-1", "+15", "99999999999", "FOO", "SIG", "sig",
                          "SIGSIGTERM", " TERM", "TERM ", "15s", "RTMIN+1", "0x0f"}) {
    EXPECT_THROW(parse_signal(text), std::invalid_argument) << "\"" << text << "\"";
  }
}

TEST(SignalName, RendersNames) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(0), "signal 0");
  EXPECT_EQ(signal_name(-3), "signal -3");
  EXPECT_EQ(signal_name(200), "signal 200");
  for (int sig = 1; sig < 32; ++sig) {
    EXPECT_EQ(parse_signal(signal_name(sig)), sig) << signal_name(sig);
  }
}

// --- flags ---------------------------------------------------------------------------------------

TEST(ParseFlags, Defaults) {
  const config c = parse({});
  EXPECT_EQ(c.what, config::action::run);
  EXPECT_THAT(c.listen, ElementsAre(listen_address{"0.0.0.0", 6080}));
  EXPECT_EQ(c.drain_delay, 70s);
  // Not given: planned from kube-apiserver's own shutdown delay (issue 32).
  EXPECT_EQ(c.signal_delay, std::nullopt);
  EXPECT_EQ(c.exit_timeout, 65s);
  EXPECT_EQ(c.signal, SIGTERM);
  EXPECT_FALSE(c.target.any());
  EXPECT_EQ(c.inhibit, inhibit_mode::automatic);
  EXPECT_EQ(c.forward_on_sigterm, forward_policy::automatic);
  EXPECT_EQ(c.event_log, "");
  EXPECT_EQ(c.format, log_format::text);
  EXPECT_EQ(c.ensure_inhibit_delay, ensure_mode::off);
  EXPECT_EQ(c.logind_conf_dir, "/etc/systemd/logind.conf.d");
}

// Each flag in both spellings gives the same config.
struct flag_case {
  std::string_view flag;
  std::string_view value;
  void (*check)(const config&);
};

TEST(ParseFlags, EveryFlagInBothForms) {
  const flag_case cases[] = {
      {"--listen", "127.0.0.1:8080",
       [](const config& c) {
         EXPECT_THAT(c.listen, ElementsAre(listen_address{"127.0.0.1", 8080}));
       }},
      {"--drain-delay", "1m30s", [](const config& c) { EXPECT_EQ(c.drain_delay, 90s); }},
      {"--signal-delay", "250ms", [](const config& c) { EXPECT_EQ(c.signal_delay, 250ms); }},
      {"--exit-timeout", "2m", [](const config& c) { EXPECT_EQ(c.exit_timeout, 2min); }},
      {"--signal", "INT", [](const config& c) { EXPECT_EQ(c.signal, SIGINT); }},
      {"--target-pid", "1234", [](const config& c) { EXPECT_EQ(c.target.pid, 1234); }},
      {"--target-pidfile", "/run/kube-apiserver.pid",
       [](const config& c) { EXPECT_EQ(c.target.pidfile, "/run/kube-apiserver.pid"); }},
      {"--target-name", "kube-apiserver",
       [](const config& c) { EXPECT_EQ(c.target.name, "kube-apiserver"); }},
      {"--inhibit", "required",
       [](const config& c) { EXPECT_EQ(c.inhibit, inhibit_mode::required); }},
      {"--forward-on-sigterm", "never",
       [](const config& c) { EXPECT_EQ(c.forward_on_sigterm, forward_policy::never); }},
      {"--event-log", "/var/log/shim.jsonl",
       [](const config& c) { EXPECT_EQ(c.event_log, "/var/log/shim.jsonl"); }},
      {"--log-format", "json", [](const config& c) { EXPECT_EQ(c.format, log_format::json); }},
      {"--logind-conf-dir", "/tmp/sandbox/etc-systemd/logind.conf.d",
       [](const config& c) {
         EXPECT_EQ(c.logind_conf_dir, "/tmp/sandbox/etc-systemd/logind.conf.d");
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flag);
    const std::string joined = std::string(c.flag) + "=" + std::string(c.value);
    c.check(parse({joined}));
    c.check(parse({c.flag, c.value}));
    // And amid other flags.
    const std::string_view before =
        c.flag == "--log-format" ? "--signal=TERM" : "--log-format=text";
    const std::string_view after = c.flag == "--inhibit" ? "--signal=TERM" : "--inhibit=auto";
    c.check(parse({before, c.flag, c.value, after}));
  }
}

TEST(ParseFlags, EnumValues) {
  EXPECT_EQ(parse({"--inhibit=auto"}).inhibit, inhibit_mode::automatic);
  EXPECT_EQ(parse({"--inhibit=required"}).inhibit, inhibit_mode::required);
  EXPECT_EQ(parse({"--inhibit=off"}).inhibit, inhibit_mode::off);
  EXPECT_EQ(parse({"--forward-on-sigterm=auto"}).forward_on_sigterm, forward_policy::automatic);
  EXPECT_EQ(parse({"--forward-on-sigterm=always"}).forward_on_sigterm, forward_policy::always);
  EXPECT_EQ(parse({"--forward-on-sigterm=never"}).forward_on_sigterm, forward_policy::never);
  EXPECT_EQ(parse({"--log-format=text"}).format, log_format::text);
  EXPECT_EQ(parse({"--log-format=json"}).format, log_format::json);

  EXPECT_EQ(usage_message({"--inhibit=maybe"}),
            "--inhibit: \"maybe\" is not one of auto, required, off");
  EXPECT_EQ(usage_message({"--forward-on-sigterm", "Always"}),
            "--forward-on-sigterm: \"Always\" is not one of auto, always, never");
  EXPECT_EQ(usage_message({"--log-format=yaml"}),
            "--log-format: \"yaml\" is not one of text, json");
}

TEST(ParseFlags, EnsureInhibitDelayValueIsOptional) {
  EXPECT_EQ(parse({"--ensure-inhibit-delay"}).ensure_inhibit_delay, ensure_mode::best_effort);
  EXPECT_EQ(parse({"--ensure-inhibit-delay=try"}).ensure_inhibit_delay, ensure_mode::best_effort);
  EXPECT_EQ(parse({"--ensure-inhibit-delay=required"}).ensure_inhibit_delay, ensure_mode::required);
  // Bare, it never takes the next argument as its value.
  const config c = parse({"--ensure-inhibit-delay", "--drain-delay=5s"});
  EXPECT_EQ(c.ensure_inhibit_delay, ensure_mode::best_effort);
  EXPECT_EQ(c.drain_delay, 5s);
  EXPECT_EQ(usage_message({"--ensure-inhibit-delay", "required"}),
            "unexpected argument \"required\"; put the command after --");
  EXPECT_EQ(usage_message({"--ensure-inhibit-delay="}),
            "--ensure-inhibit-delay: \"\" is not one of try, required");
  EXPECT_EQ(usage_message({"--ensure-inhibit-delay=yes"}),
            "--ensure-inhibit-delay: \"yes\" is not one of try, required");
  EXPECT_EQ(usage_message({"--ensure-inhibit-delay", "--ensure-inhibit-delay=required"}),
            "--ensure-inhibit-delay: given more than once");
  // Try mode may wrap a command; required may not (its failure would orphan the command).
  EXPECT_TRUE(parse({"--ensure-inhibit-delay", "--", "sleep", "1"}).target.wrapper());
  EXPECT_THAT(usage_message({"--ensure-inhibit-delay=required", "--", "sleep", "1"}),
              StartsWith("--ensure-inhibit-delay=required cannot wrap a command"));
  EXPECT_THAT(usage_message({"--inhibit=off", "--ensure-inhibit-delay"}),
              StartsWith("--ensure-inhibit-delay needs logind"));
}

TEST(ParseFlags, LogindConfDir) {
  EXPECT_EQ(parse({"--logind-conf-dir=/x/logind.conf.d/"}).logind_conf_dir, "/x/logind.conf.d");
  EXPECT_EQ(usage_message({"--logind-conf-dir=etc/logind.conf.d"}),
            "--logind-conf-dir: \"etc/logind.conf.d\" is not an absolute path");
  EXPECT_EQ(usage_message({"--logind-conf-dir="}),
            "--logind-conf-dir: \"\" is not an absolute path");
}

TEST(ParseFlags, KubeletFiles) {
  const auto c = parse({"--kubelet-config=/var/lib/kubelet/config.yaml", "--static-pod-manifest",
                        "/etc/kubernetes/manifests/kube-apiserver.yaml"});
  EXPECT_EQ(c.kubelet_config, "/var/lib/kubelet/config.yaml");
  EXPECT_EQ(c.static_pod_manifest, "/etc/kubernetes/manifests/kube-apiserver.yaml");
  EXPECT_EQ(parse({}).kubelet_config, "");
  EXPECT_EQ(usage_message({"--kubelet-config=config.yaml"}),
            "--kubelet-config: \"config.yaml\" is not an absolute path");
  EXPECT_EQ(usage_message({"--static-pod-manifest="}),
            "--static-pod-manifest: \"\" is not an absolute path");
}

TEST(ParseFlags, ValueMayContainEquals) {
  EXPECT_EQ(parse({"--event-log=/tmp/a=b"}).event_log, "/tmp/a=b");
  EXPECT_EQ(parse({"--event-log", "/tmp/a=b"}).event_log, "/tmp/a=b");
}

TEST(ParseFlags, SpaceFormTakesValuesStartingWithOneDash) {
  EXPECT_EQ(parse({"--target-name", "-weird"}).target.name, "-weird");
  EXPECT_THAT(usage_message({"--drain-delay", "-5s"}),
              StartsWith("--drain-delay: \"-5s\" is negative"));
}

TEST(ParseFlags, ListenRepeatsReplaceDefaultThenAdd) {
  const config c = parse({"--listen=127.0.0.1:6080", "--listen", "[::1]:6080", "--listen=[::]:7000",
                          "--listen=0.0.0.0:7000"});
  EXPECT_THAT(c.listen, ElementsAre(listen_address{"127.0.0.1", 6080}, listen_address{"::1", 6080},
                                    listen_address{"::", 7000}, listen_address{"0.0.0.0", 7000}));
}

TEST(ParseFlags, ListenDefaultMayBeRepeatedOnce) {
  EXPECT_THAT(parse({"--listen=0.0.0.0:6080"}).listen,
              ElementsAre(listen_address{"0.0.0.0", 6080}));
}

TEST(ParseFlags, ListenIPv6IsCanonical) {
  EXPECT_THAT(parse({"--listen=[0:0::1]:80"}).listen, ElementsAre(listen_address{"::1", 80}));
  EXPECT_THAT(parse({"--listen=[FE80::A]:80"}).listen, ElementsAre(listen_address{"fe80::a", 80}));
  EXPECT_THAT(parse({"--listen=[::ffff:10.0.0.1]:443"}).listen,
              ElementsAre(listen_address{"::ffff:10.0.0.1", 443}));
  EXPECT_THAT(parse({"--listen=10.0.0.1:65535"}).listen,
              ElementsAre(listen_address{"10.0.0.1", 65535}));
}

TEST(ParseFlags, ListenDuplicatesAreErrors) {
  EXPECT_EQ(usage_message({"--listen=127.0.0.1:80", "--listen=127.0.0.1:80"}),
            "--listen: 127.0.0.1:80 given twice");
  EXPECT_EQ(usage_message({"--listen=[::]:80", "--listen=[0::0]:80"}),
            "--listen: [::]:80 given twice");
}

TEST(ParseFlags, ListenBadValues) {
  const std::string_view bad[] = {
      "",
      "6080",
      ":6080",
      "localhost:6080",
      "0.0.0.0",
      "0.0.0.0:",
      "0.0.0.0:0",
      "0.0.0.0:65536",
      "0.0.0.0:-1",
      "0.0.0.0:+80",
      "0.0.0.0:http",
      "::1:6080",
      "[::1]",
      "[::1]6080",
      "[::1:6080",
      "[]:6080",
      "[1.2.3.4]:80",
      "1.2.3:80",
      "256.0.0.1:80",
      "[fe80::1%eth0]:80",
      "01.2.3.4:80",
      "0.0.0.0:99999999999",
  };
  for (const auto value : bad) {
    const std::string arg = "--listen=" + std::string(value);
    EXPECT_THAT(usage_message({arg}), StartsWith("--listen: ")) << value;
  }
  EXPECT_THAT(usage_message({"--listen=::1:6080"}), HasSubstr("brackets"));
  EXPECT_THAT(usage_message({"--listen=0.0.0.0:0"}), HasSubstr("1..65535"));
  EXPECT_THAT(usage_message({"--listen=localhost:80"}), HasSubstr("not a literal IPv4 address"));
}

TEST(ParseFlags, DurationErrorsNameTheFlag) {
  EXPECT_EQ(usage_message({"--drain-delay=7x"}),
            "--drain-delay: \"7x\" is not a duration (want e.g. 70s, 1m30s, 250ms)");
  EXPECT_EQ(usage_message({"--signal-delay", "1"}),
            "--signal-delay: \"1\" is not a duration (want e.g. 70s, 1m30s, 250ms)");
  EXPECT_THAT(usage_message({"--exit-timeout="}),
              StartsWith("--exit-timeout: \"\" is not a duration"));
  EXPECT_EQ(usage_message({"--exit-timeout=-1s"}),
            "--exit-timeout: \"-1s\" is negative; a delay must be 0 or more");
  EXPECT_EQ(usage_message({"--drain-delay=9999999h"}),
            "--drain-delay: \"9999999h\" is longer than 24h0m0s, the most a duration flag may be");
  EXPECT_EQ(parse({"--drain-delay=0", "--signal-delay=0s", "--exit-timeout=0ms"}).drain_delay, 0s);
}

// Issue 8, item 9: --drain-delay=2562047h47m16s parsed, and the hold + margin sums wrapped (the
// hold was released after 3.7 ms). Every duration flag is bounded at 24h by the one helper.
TEST(ParseFlags, EveryDurationFlagIsAtMostADay) {
  for (const std::string flag : {"--drain-delay", "--signal-delay", "--exit-timeout"}) {
    for (const std::string value :
         {"2562047h47m16s", "24h0m0.000000001s", "25h", "1441m", "86401s", "2562047h47m17s"}) {
      EXPECT_EQ(
          usage_message({flag + "=" + value}),
          flag + ": \"" + value + "\" is longer than 24h0m0s, the most a duration flag may be");
    }
    EXPECT_EQ(parse({flag + "=24h"}).what, config::action::run);
    EXPECT_EQ(parse({flag + "=1439m59.999999999s"}).what, config::action::run);
  }
  const config longest = parse({"--drain-delay=24h", "--signal-delay=24h", "--exit-timeout=24h"});
  EXPECT_EQ(longest.drain_delay, 24h);
  EXPECT_EQ(longest.signal_delay, 24h);
  EXPECT_EQ(longest.exit_timeout, 24h);
}

TEST(ParseFlags, SignalFlag) {
  EXPECT_EQ(parse({"--signal=SIGINT"}).signal, SIGINT);
  EXPECT_EQ(parse({"--signal", "hup"}).signal, SIGHUP);
  EXPECT_EQ(parse({"--signal=9"}).signal, SIGKILL);
  EXPECT_THAT(usage_message({"--signal=FOO"}), StartsWith("--signal: unknown signal \"FOO\""));
  EXPECT_EQ(usage_message({"--signal=0"}), "--signal: signal number 0 is not in 1..64");
  EXPECT_EQ(usage_message({"--signal=65"}), "--signal: signal number 65 is not in 1..64");
}

TEST(ParseFlags, TargetValues) {
  EXPECT_EQ(parse({"--target-pid=2"}).target.pid, 2);
  EXPECT_EQ(parse({"--target-pid=2147483647"}).target.pid, 2147483647);
  for (const auto value : {"0", "-1", "+5", "abc", "12a", "", "2147483648", " 5"}) {
    const std::string arg = "--target-pid=" + std::string(value);
    EXPECT_THAT(usage_message({arg}), StartsWith("--target-pid: ")) << value;
  }
  EXPECT_EQ(usage_message({"--target-pidfile="}), "--target-pidfile: empty path");
  EXPECT_EQ(usage_message({"--target-name="}), "--target-name: empty name");
  EXPECT_THAT(usage_message({"--target-name=/usr/bin/kube-apiserver"}),
              StartsWith("--target-name: \"/usr/bin/kube-apiserver\" contains '/'"));
  // Longer than comm's 15 bytes: accepted, the resolver truncates as the kernel does.
  EXPECT_EQ(parse({"--target-name=kube-controller-manager"}).target.name,
            "kube-controller-manager");
  EXPECT_EQ(usage_message({"--event-log="}), "--event-log: empty path");
}

// Issue 8, item 7: --target-pid=1 was accepted, and a shutdown sent SIGTERM to init.
TEST(ParseFlags, TargetPidOneIsAUsageError) {
  EXPECT_EQ(usage_message({"--target-pid=1"}),
            "--target-pid: PID 1 is init; the shim never signals it");
  EXPECT_EQ(usage_message({"--target-pid", "01"}),
            "--target-pid: PID 1 is init; the shim never signals it");
}

TEST(ParseFlags, TargetUserNarrowsTargetName) {
  EXPECT_EQ(parse({"--target-name=x"}).target.name_uid, 0u) << "root's processes by default";
  EXPECT_EQ(parse({"--target-name=x", "--target-user=nobody"}).target.name_uid, 65534u);
  EXPECT_EQ(parse({"--target-user", "root", "--target-name=x"}).target.name_uid, 0u);
  EXPECT_EQ(parse({"--target-name=x", "--target-user=1234"}).target.name_uid, 1234u);
  EXPECT_EQ(usage_message({"--target-name=x", "--target-user=no-such-user-here"}),
            "--target-user: no user \"no-such-user-here\"");
  EXPECT_EQ(usage_message({"--target-name=x", "--target-user="}), "--target-user: empty user");
  EXPECT_EQ(usage_message({"--target-name=x", "--target-user=4294967295"}),
            "--target-user: \"4294967295\" is not a valid UID");
  EXPECT_EQ(usage_message({"--target-name=x", "--target-user=4294967296"}),
            "--target-user: \"4294967296\" is not a valid UID");
  EXPECT_EQ(usage_message({"--target-user=root"}), "--target-user applies only to --target-name");
  EXPECT_EQ(usage_message({"--target-pidfile=/p", "--target-user=root"}),
            "--target-user applies only to --target-name");
  EXPECT_EQ(usage_message({"--target-name=x", "--target-user=0", "--target-user=0"}),
            "--target-user: given more than once");
}

TEST(ParseFlags, TargetConflictsNameBothFlags) {
  EXPECT_EQ(
      usage_message({"--target-pid=2", "--target-name=x"}),
      "--target-pid and --target-name are mutually exclusive; pick one way to find the target");
  EXPECT_THAT(usage_message({"--target-pidfile=/p", "--target-pid", "2"}),
              StartsWith("--target-pidfile and --target-pid are mutually exclusive"));
  EXPECT_THAT(usage_message({"--target-name=x", "--target-pidfile=/p"}),
              StartsWith("--target-name and --target-pidfile are mutually exclusive"));
  EXPECT_THAT(usage_message({"--target-name=x", "--", "sleep", "1"}),
              StartsWith("--target-name and a command after -- are mutually exclusive"));
  EXPECT_THAT(usage_message({"--target-pid=2", "--", "sleep"}),
              StartsWith("--target-pid and a command after -- are mutually exclusive"));
}

TEST(ParseFlags, SingleValuedFlagsOnlyOnce) {
  EXPECT_EQ(usage_message({"--drain-delay=1s", "--drain-delay", "2s"}),
            "--drain-delay: given more than once");
  EXPECT_EQ(usage_message({"--target-pid=2", "--target-pid=3"}),
            "--target-pid: given more than once");
  EXPECT_EQ(usage_message({"--log-format=json", "--log-format=json"}),
            "--log-format: given more than once");
}

TEST(ParseFlags, WrapperCommand) {
  const config c = parse({"--drain-delay=5s", "--", "kube-apiserver", "--secure-port=6443", "--",
                          "--help", "-h", "x y"});
  EXPECT_EQ(c.what, config::action::run);
  EXPECT_EQ(c.drain_delay, 5s);
  EXPECT_TRUE(c.target.wrapper());
  EXPECT_THAT(c.target.command,
              ElementsAre("kube-apiserver", "--secure-port=6443", "--", "--help", "-h", "x y"));

  EXPECT_THAT(parse({"--", "sleep"}).target.command, ElementsAre("sleep"));
  EXPECT_EQ(usage_message({"--"}), "nothing after --; give the command to run");
  EXPECT_EQ(usage_message({"--", ""}), "the command after -- is empty");
}

TEST(ParseFlags, PositionalArgumentsNeedDashDash) {
  EXPECT_EQ(usage_message({"sleep", "10"}),
            "unexpected argument \"sleep\"; put the command after --");
  EXPECT_EQ(usage_message({"--drain-delay=1s", "-"}),
            "unexpected argument \"-\"; put the command after --");
  EXPECT_EQ(usage_message({""}), "unexpected argument \"\"; put the command after --");
}

TEST(ParseFlags, UnknownFlags) {
  EXPECT_EQ(usage_message({"--foo"}), "unknown flag --foo");
  EXPECT_EQ(usage_message({"--foo=bar"}), "unknown flag --foo");
  EXPECT_EQ(usage_message({"-x"}), "unknown flag -x");
  EXPECT_EQ(usage_message({"-listen=0.0.0.0:80"}), "unknown flag -listen");
  EXPECT_EQ(usage_message({"--Listen=0.0.0.0:80"}), "unknown flag --Listen");
  EXPECT_EQ(usage_message({"---listen=0.0.0.0:80"}), "unknown flag ---listen");
  EXPECT_EQ(usage_message({"--=x"}), "unknown flag --");
  // Found by the flags fuzz target: the name was printed raw, and a newline split the one line.
  EXPECT_EQ(usage_message({"--ta\n"}), "unknown flag \"--ta\\n\"");
  EXPECT_EQ(usage_message({"--a b=1"}), "unknown flag \"--a b\"");
}

TEST(ParseFlags, MissingValues) {
  EXPECT_EQ(usage_message({"--drain-delay"}),
            "--drain-delay: missing value (want --drain-delay=DURATION)");
  EXPECT_EQ(usage_message({"--listen"}), "--listen: missing value (want --listen=HOST:PORT)");
  // A following flag is not taken for the value.
  EXPECT_EQ(usage_message({"--event-log", "--log-format=json"}),
            "--event-log: missing value (want --event-log=PATH)");
  EXPECT_EQ(usage_message({"--target-name", "--", "sleep"}),
            "--target-name: missing value (want --target-name=NAME)");
  // ...unless given with '='.
  EXPECT_EQ(parse({"--event-log=--odd"}).event_log, "--odd");
}

TEST(ParseFlags, HelpAndVersion) {
  EXPECT_EQ(parse({"--help"}).what, config::action::help);
  EXPECT_EQ(parse({"-h"}).what, config::action::help);
  EXPECT_EQ(parse({"--version"}).what, config::action::version);
  // Wins over what follows, even nonsense...
  EXPECT_EQ(parse({"--drain-delay=1s", "--help", "--bogus", "stray"}).what, config::action::help);
  EXPECT_EQ(parse({"--version", "--help"}).what, config::action::version);
  EXPECT_EQ(parse({"--target-pid=2", "--version", "--target-name=x"}).what,
            config::action::version);
  // ...but what comes before is still checked.
  EXPECT_EQ(usage_message({"--bogus", "--help"}), "unknown flag --bogus");
  EXPECT_THAT(usage_message({"--drain-delay=x", "--version"}), StartsWith("--drain-delay: "));
  // After -- it belongs to the command.
  EXPECT_EQ(parse({"--", "prog", "--help"}).what, config::action::run);
  EXPECT_EQ(usage_message({"--help=yes"}), "--help takes no value");
  EXPECT_EQ(usage_message({"--version=1"}), "--version takes no value");
}

// --- the upstream check (issue 9)
// -----------------------------------------------------------------

TEST(ParseFlags, UpstreamIsOffWithoutTheURL) {
  const config c = parse({});
  EXPECT_FALSE(c.upstream.enabled());
  EXPECT_EQ(c.upstream.interval, 1s);
  EXPECT_EQ(c.upstream.timeout, 1s);
  EXPECT_EQ(c.upstream.fall, 3u);
  EXPECT_EQ(c.upstream.rise, 2u);
}

TEST(ParseFlags, UpstreamFlags) {
  const config c =
      parse({"--upstream-readyz=https://localhost:6443/readyz", "--upstream-interval=250ms",
             "--upstream-timeout", "2s", "--upstream-fall=5", "--upstream-rise=1",
             "--upstream-ca-file=/etc/kubernetes/pki/ca.crt",
             "--upstream-tls-server-name=kubernetes", "--upstream-client-cert=/c.crt",
             "--upstream-client-key=/c.key", "--upstream-token-file=/t"});
  ASSERT_TRUE(c.upstream.enabled());
  EXPECT_TRUE(c.upstream.url.tls);
  EXPECT_EQ(c.upstream.url.host, "localhost");
  EXPECT_EQ(c.upstream.url.port, 6443);
  EXPECT_EQ(c.upstream.url.target, "/readyz");
  EXPECT_EQ(c.upstream.interval, 250ms);
  EXPECT_EQ(c.upstream.timeout, 2s);
  EXPECT_EQ(c.upstream.fall, 5u);
  EXPECT_EQ(c.upstream.rise, 1u);
  EXPECT_EQ(c.upstream.ca_file, "/etc/kubernetes/pki/ca.crt");
  EXPECT_EQ(c.upstream.server_name, "kubernetes");
  EXPECT_EQ(c.upstream.client_cert, "/c.crt");
  EXPECT_EQ(c.upstream.client_key, "/c.key");
  EXPECT_EQ(c.upstream.token_file, "/t");
  EXPECT_FALSE(c.upstream.insecure_skip_verify);

  const config skip =
      parse({"--upstream-readyz=https://127.0.0.1:6443/readyz", "--upstream-insecure-skip-verify"});
  EXPECT_TRUE(skip.upstream.insecure_skip_verify);
  const config plain = parse({"--upstream-readyz=http://[::1]:8080/readyz?verbose"});
  EXPECT_FALSE(plain.upstream.url.tls);
  EXPECT_EQ(plain.upstream.url.host, "::1");
  EXPECT_EQ(plain.upstream.url.target, "/readyz?verbose");
}

// Issue 9, item 7: each exits 2 (main() turns a usage_error into 2) with one line naming the flag.
TEST(ParseFlags, UpstreamBadInputNamesTheFlag) {
  const std::string_view url = "--upstream-readyz=https://localhost:6443/readyz";
  EXPECT_THAT(usage_message({"--upstream-readyz=ftp://localhost/readyz"}),
              StartsWith("--upstream-readyz: \"ftp://localhost/readyz\": want an http:// or "
                         "https:// URL"));
  EXPECT_THAT(usage_message({"--upstream-readyz=https://localhost:99999/readyz"}),
              StartsWith("--upstream-readyz: "));
  EXPECT_THAT(usage_message({"--upstream-readyz=https:///readyz"}),
              StartsWith("--upstream-readyz: "));
  EXPECT_THAT(usage_message({"--upstream-readyz=localhost:6443"}),
              StartsWith("--upstream-readyz: "));
  EXPECT_EQ(usage_message({url, "--upstream-fall=0"}),
            "--upstream-fall: \"0\" is not a count from 1 to 1000");
  EXPECT_EQ(usage_message({url, "--upstream-rise=0"}),
            "--upstream-rise: \"0\" is not a count from 1 to 1000");
  EXPECT_EQ(usage_message({url, "--upstream-rise=-1"}),
            "--upstream-rise: \"-1\" is not a count from 1 to 1000");
  EXPECT_EQ(usage_message({url, "--upstream-fall=1001"}),
            "--upstream-fall: \"1001\" is not a count from 1 to 1000");
  EXPECT_EQ(usage_message({url, "--upstream-interval=0"}),
            "--upstream-interval: \"0\" is zero; want more than 0");
  EXPECT_EQ(usage_message({url, "--upstream-timeout=0s"}),
            "--upstream-timeout: \"0s\" is zero; want more than 0");
  EXPECT_EQ(usage_message({url, "--upstream-timeout=25h"}),
            "--upstream-timeout: \"25h\" is longer than 24h0m0s, the most a duration flag may be");
  EXPECT_EQ(usage_message({url, "--upstream-interval=1x"}),
            "--upstream-interval: \"1x\" is not a duration (want e.g. 70s, 1m30s, 250ms)");
  EXPECT_EQ(usage_message({url, "--upstream-client-cert=/c.crt"}),
            "--upstream-client-cert needs --upstream-client-key");
  EXPECT_EQ(usage_message({url, "--upstream-client-key=/c.key"}),
            "--upstream-client-key needs --upstream-client-cert");
  EXPECT_EQ(usage_message({"--upstream-fall=3"}), "--upstream-fall needs --upstream-readyz");
  EXPECT_EQ(usage_message({"--upstream-insecure-skip-verify"}),
            "--upstream-insecure-skip-verify needs --upstream-readyz");
  EXPECT_EQ(usage_message(
                {"--upstream-readyz=http://127.0.0.1:8080/readyz", "--upstream-ca-file=/ca.crt"}),
            "--upstream-ca-file applies only to an https:// --upstream-readyz");
  EXPECT_THAT(usage_message({url, "--upstream-insecure-skip-verify", "--upstream-ca-file=/ca"}),
              StartsWith("--upstream-insecure-skip-verify and --upstream-ca-file"));
  EXPECT_EQ(usage_message({url, "--upstream-insecure-skip-verify=true"}),
            "--upstream-insecure-skip-verify takes no value");
  EXPECT_EQ(
      usage_message({url, "--upstream-insecure-skip-verify", "--upstream-insecure-skip-verify"}),
      "--upstream-insecure-skip-verify: given more than once");
  EXPECT_EQ(usage_message({url, "--upstream-ca-file="}), "--upstream-ca-file: empty path");
  EXPECT_EQ(usage_message({url, url}), "--upstream-readyz: given more than once");
}

TEST(UsageText, ListsEveryFlagWithinHundredColumns) {
  const subcommand report{.name = "report",
                          .synopsis = "[--event-log=PATH | --journal] [--boots=N] [--json]",
                          .summary = "what each recent shutdown did, and whether it was clean",
                          .run = nullptr};
  const std::string text = usage_text(std::span(&report, 1));
  for (const auto flag : {"--listen=",
                          "--drain-delay=",
                          "--signal-delay=",
                          "--exit-timeout=",
                          "--signal=",
                          "--target-pid=",
                          "--target-pidfile=",
                          "--target-name=",
                          "--target-user=",
                          "--inhibit=",
                          "--forward-on-sigterm=",
                          "--event-log=",
                          "--log-format=",
                          "--ensure-inhibit-delay[=try|required]",
                          "--logind-conf-dir=",
                          "--help",
                          "-h",
                          "--version",
                          "-- COMMAND",
                          "--upstream-readyz=",
                          "--upstream-interval=",
                          "--upstream-timeout=",
                          "--upstream-fall=",
                          "--upstream-rise=",
                          "--upstream-ca-file=",
                          "--upstream-tls-server-name=",
                          "--upstream-insecure-skip-verify",
                          "--upstream-client-cert=",
                          "--upstream-client-key=",
                          "--upstream-token-file="}) {
    EXPECT_THAT(text, HasSubstr(flag));
  }
  for (const auto def : {"(default 0.0.0.0:6080)", "(default 1m10s)",
                         "(default: the drain\n"
                         "                               minus kube-apiserver's "
                         "--shutdown-delay-duration, or 0)",
                         "(default 1m5s)", "(default TERM)", "(default auto)", "(default text)",
                         "(default /etc/systemd/logind.conf.d)", "at most 24h0m0s"}) {
    EXPECT_THAT(text, HasSubstr(def));
  }
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 100u) << line;
    EXPECT_EQ(line.find('\t'), std::string::npos) << line;
    ++count;
  }
  EXPECT_GT(count, 15);
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
}  // namespace shim
