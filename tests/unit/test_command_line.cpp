// The built shim's command line as a user meets it: its commands and their usage errors, and the
// bash completion (unit-files/bash-completion/shutdown-shim) in real bash, with bash-completion's
// helpers loaded as in an interactive shell (tests/unit/complete_words.bash gives the function the
// words readline would): what it offers, held to the daemon's flag table and to the commands the
// shim's --help lists, with their own --help's flags. A flag or a command added there without its
// completion fails here.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "config/config.hpp"
#include "log_test_support.hpp"
#include "util/unique_fd.hpp"

extern char** environ;

namespace shim {
namespace {

using testing::Contains;
using testing::ElementsAre;
using testing::IsSupersetOf;
using testing::Not;
using testing::UnorderedElementsAreArray;

// Set by tests/unit/meson.build.
std::string from_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set");
  return value;
}

// bash-completion's main script: a test dependency (scripts/deps.sh), never skipped.
constexpr std::string_view kBashCompletion = "/usr/share/bash-completion/bash_completion";

struct ran {
  std::string out;
  std::string err;
  int exit_code = -1;
};

std::string read_all(const unique_fd& fd) {
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd.get(), buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "read");
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

// argv[0] run with argv (no PATH lookup), stdout and stderr to pipes. Both are read in turn: what
// is run here writes a few KiB at most, within a pipe's buffer.
ran run(const std::vector<std::string>& argv) {
  std::array<unique_fd, 2> reads;
  std::array<unique_fd, 2> writes;
  for (std::size_t i = 0; i < 2; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category());
    reads[i].reset(fds[0]);
    writes[i].reset(fds[1]);
  }
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, writes[0].get(), STDOUT_FILENO);
  ::posix_spawn_file_actions_adddup2(&actions, writes[1].get(), STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::system_error(spawned, std::generic_category(), argv[0]);
  for (auto& fd : writes) fd.reset();
  ran r{.out = read_all(reads[0]), .err = read_all(reads[1])};
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// run(argv)'s stdout, and a test failure unless it exits 0.
std::string output_of(const std::vector<std::string>& argv) {
  const ran r = run(argv);
  EXPECT_EQ(r.exit_code, 0) << argv[0] << " " << argv.back() << ": " << r.err;
  return r.out;
}

ran shim(const std::vector<std::string>& args) {
  std::vector<std::string> argv{from_env("SHUTDOWN_SHIM")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

struct offer {
  std::vector<std::string> words;
  std::set<std::string> options;  // compopt's: "-o nospace", "-o filenames"
};

class BashCompletion : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kBashCompletion))
        << kBashCompletion << " is missing: install bash-completion (scripts/deps.sh)";
    std::ofstream(dir_.path() + "/a-file").put('\n');
    std::filesystem::create_directory(dir_.path() + "/a-dir");
  }

  // What <TAB> at the end of line offers, in the folder that holds a-file and a-dir.
  offer complete(const std::string& line) const {
    std::istringstream lines(
        output_of({"/bin/bash", from_env("COMPLETE_WORDS"), std::string(kBashCompletion),
                   from_env("SHUTDOWN_SHIM_COMPLETION"), dir_.path(), line}));
    offer o;
    for (std::string word; std::getline(lines, word);) {
      if (word.starts_with("compopt ")) {
        o.options.insert(word.substr(8));
      } else {
        o.words.push_back(word);
      }
    }
    return o;
  }

  std::vector<std::string> words(const std::string& line) const { return complete(line).words; }

  static std::string shim_help(const std::vector<std::string>& args) {
    const ran r = shim(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // The names in the Commands section of the built shim's --help: main()'s table.
  static std::vector<std::string> commands() {
    std::istringstream lines(shim_help({"--help"}));
    std::vector<std::string> names;
    bool in_section = false;
    for (std::string line; std::getline(lines, line);) {
      if (line == "Commands:") {
        in_section = true;
      } else if (in_section && line.empty()) {
        break;
      } else if (in_section && line.starts_with("  ") && line[2] != ' ') {
        names.push_back(line.substr(2, line.find(' ', 2) - 2));
      }
    }
    return names;
  }

  test::temp_dir dir_;
};

TEST(CommandLine, AnUnknownCommandIsAUsageErrorNamingTheNearest) {
  constexpr std::string_view kWrap = " (a command to wrap goes after --)\n";
  auto r = shim({"reprot"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: unknown command \"reprot\"; did you mean \"report\"?" +
                       std::string(kWrap));
  EXPECT_EQ(r.out, "");
  // Before issue 23: unexpected argument "sleep"; put the command after --.
  r = shim({"sleep", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "shutdown-shim: unknown command \"sleep\"; the commands are report, status, drill, "
            "help" +
                std::string(kWrap));
  // status and drill are commands now (issue 23); a near miss of one is named.
  r = shim({"stauts"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: unknown command \"stauts\"; did you mean \"status\"?" +
                       std::string(kWrap));
  // Unchanged: a bare word after a flag, and a first argument that is no word.
  r = shim({"--drain-delay=1s", "sleep"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: unexpected argument \"sleep\"; put the command after --\n");
  r = shim({"/bin/sleep", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: unexpected argument \"/bin/sleep\"; put the command after --\n");
  r = shim({"help", "reprot"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::StartsWith("shutdown-shim: unknown command \"reprot\"; did you"));
  r = shim({"help", "report", "help"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: help: one command at most\n");
}

TEST(CommandLine, HelpListsTheCommandsAndGivesTheirs) {
  const ran help = shim({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, testing::HasSubstr("\nCommands:\n  report [--event-log=PATH|--journal]"));
  const ran bare_help = shim({"help"});
  EXPECT_EQ(bare_help.exit_code, 0);
  EXPECT_EQ(bare_help.out, help.out);
  const ran report = shim({"report", "--help"});
  EXPECT_EQ(report.exit_code, 0);
  EXPECT_THAT(report.out, testing::StartsWith("usage: shutdown-shim report "));
  const ran help_report = shim({"help", "report"});
  EXPECT_EQ(help_report.exit_code, 0);
  EXPECT_EQ(help_report.out, report.out);
  const ran help_help = shim({"help", "--help"});
  EXPECT_EQ(help_help.exit_code, 0);
  EXPECT_THAT(help_help.out, testing::StartsWith("usage: shutdown-shim help [COMMAND]\n"));
  EXPECT_EQ(shim({"help", "help"}).out, help_help.out);  // help COMMAND is COMMAND --help
}

// status and drill read their flags with the daemon's table machinery (issue 34): their usage
// errors exit 2 with one line, as report's do.
TEST(CommandLine, StatusAndDrillUsageErrors) {
  auto r = shim({"status", "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: status: unknown argument \"--bogus\"\n");
  EXPECT_EQ(r.out, "");
  r = shim({"drill", "--duration=soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::StartsWith("shutdown-shim: drill --duration: "));
  r = shim({"drill", "--stop", "--lb-fall=3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: drill --stop takes no --duration or --lb-fall\n");
  r = shim({"drill", "--state-dir"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: --state-dir: missing value\n");
  // Changed by issue 34: a flag given twice is refused, as report refuses it...
  r = shim({"status", "--json", "--json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "shutdown-shim: --json: given more than once\n");
  // ...and --help ends the reading, as it does for report and the daemon.
  r = shim({"status", "--help", "--bogus"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, testing::StartsWith("Usage: shutdown-shim status "));
}

// --help is made from the table parse_flags() reads: every flag, with what it takes.
TEST(CommandLine, HelpShowsEveryFlagOfTheTable) {
  const ran help = shim({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const auto& [spec, set] : daemon_flags().flags) {
    EXPECT_THAT(help.out, testing::HasSubstr("\n" + spec.head())) << spec.name;
  }
  EXPECT_THAT(help.out, testing::HasSubstr("\n  --inhibit=auto|required|off "));
}

// What a daemon flag is offered as: "--flag=" for a value, "--flag" without (and its alias), both
// when the value may be left out.
std::vector<std::string> offered_as(const flag_spec& def) {
  const std::string name(def.name);
  if (def.value_name.empty() && !def.alias.empty()) return {name, std::string(def.alias)};
  if (def.value_name.empty()) return {name};
  if (!def.implied_value.empty()) return {name, name + "="};
  return {name + "="};
}

// "auto|required|off": the words of a flag that takes one of a few; empty for NAME, PATH, N|UID.
std::vector<std::string> enumeration(std::string_view value_name) {
  if (value_name.find('|') == std::string_view::npos ||
      std::any_of(value_name.begin(), value_name.end(), [](char c) { return std::isupper(c); })) {
    return {};
  }
  std::vector<std::string> out;
  std::istringstream parts{std::string(value_name)};
  for (std::string part; std::getline(parts, part, '|');) out.push_back(part);
  return out;
}

TEST_F(BashCompletion, TheFirstWordIsACommand) {
  EXPECT_THAT(words("shutdown-shim "), ElementsAre("report", "status", "drill", "help"));
  EXPECT_THAT(words("shutdown-shim r"), ElementsAre("report"));
  EXPECT_THAT(words("shutdown-shim d"), ElementsAre("drill"));
  EXPECT_THAT(words("shutdown-shim help "), ElementsAre("report", "status", "drill", "help"));
  // A bare word after a flag is no command.
  EXPECT_THAT(words("shutdown-shim --drain-delay=1s r"), ElementsAre());
}

TEST_F(BashCompletion, EveryCommandOfTheTableIsOffered) {
  const auto names = commands();
  ASSERT_THAT(names, Contains("report"));
  EXPECT_THAT(words("shutdown-shim "), UnorderedElementsAreArray(names));
  EXPECT_THAT(words("shutdown-shim help "), UnorderedElementsAreArray(names));
}

TEST_F(BashCompletion, AFlagPrefixCompletesToTheFlag) {
  const auto o = complete("shutdown-shim --inh");
  EXPECT_THAT(o.words, ElementsAre("--inhibit="));
  EXPECT_THAT(o.options, Contains("-o nospace"));  // the value follows the '='
  EXPECT_THAT(words("shutdown-shim --upstream-insecure"),
              ElementsAre("--upstream-insecure-skip-verify"));
  EXPECT_THAT(words("shutdown-shim --ensure"),
              ElementsAre("--ensure-inhibit-delay", "--ensure-inhibit-delay="));
}

TEST_F(BashCompletion, EveryDaemonFlagIsOffered) {
  std::vector<std::string> want;
  for (const auto& [def, set] : daemon_flags().flags) {
    for (auto& word : offered_as(def)) want.push_back(std::move(word));
  }
  EXPECT_THAT(words("shutdown-shim -"), UnorderedElementsAreArray(want));
  // After other flags too.
  EXPECT_THAT(words("shutdown-shim --inhibit=off --drain-delay 5s -"),
              UnorderedElementsAreArray(want));
  EXPECT_THAT(words("shutdown-shim --drain-delay=5s "), UnorderedElementsAreArray(want));
}

TEST_F(BashCompletion, EnumerationsOfferTheirWords) {
  int enumerations = 0;
  for (const auto& [def, set] : daemon_flags().flags) {
    const auto values = enumeration(def.value_name);
    if (values.empty()) continue;
    ++enumerations;
    const std::string name(def.name);
    EXPECT_THAT(words("shutdown-shim " + name + "="), UnorderedElementsAreArray(values)) << name;
    EXPECT_THAT(words("shutdown-shim --listen=[::]:80 " + name + "=" + values.back()),
                ElementsAre(values.back()))
        << name;
    // "--flag value" too, unless the value is optional (then only "--flag=value" gives one).
    if (def.implied_value.empty()) {
      EXPECT_THAT(words("shutdown-shim " + name + " "), UnorderedElementsAreArray(values)) << name;
    } else {
      EXPECT_THAT(words("shutdown-shim " + name + " "), Not(Contains(values.front()))) << name;
    }
  }
  EXPECT_EQ(enumerations, 4);  // inhibit, forward-on-sigterm, log-format, ensure-inhibit-delay
  EXPECT_THAT(words("shutdown-shim --inhibit=r"), ElementsAre("required"));
}

TEST_F(BashCompletion, PathFlagsOfferFiles) {
  for (const auto& [def, set] : daemon_flags().flags) {
    if (def.value_name != "PATH") continue;
    const std::string name(def.name);
    const auto o = complete("shutdown-shim " + name + "=a");
    EXPECT_THAT(o.words, Contains("a-dir")) << name;
    EXPECT_THAT(o.options, Contains("-o filenames")) << name;
  }
  // Directories only where the flag names one.
  EXPECT_THAT(words("shutdown-shim --event-log=a"), UnorderedElementsAreArray({"a-file", "a-dir"}));
  EXPECT_THAT(words("shutdown-shim --state-dir=a"), ElementsAre("a-dir"));
  EXPECT_THAT(words("shutdown-shim --logind-conf-dir a"), ElementsAre("a-dir"));
  EXPECT_THAT(words("shutdown-shim report --event-log=a"),
              UnorderedElementsAreArray({"a-file", "a-dir"}));
  EXPECT_THAT(words("shutdown-shim report --journal-dir=a"), ElementsAre("a-dir"));
}

TEST_F(BashCompletion, ReportFlags) {
  EXPECT_THAT(words("shutdown-shim report --"),
              UnorderedElementsAreArray(
                  {"--event-log=", "--journal", "--boots=", "--json", "--journal-dir=", "--help"}));
  EXPECT_THAT(words("shutdown-shim report --journal --j"),
              UnorderedElementsAreArray({"--journal", "--json", "--journal-dir="}));
  EXPECT_THAT(words("shutdown-shim report --boots="), ElementsAre());
}

// Each command's flags as its --help names them ("--json", "--boots=N"), all offered.
TEST_F(BashCompletion, EveryFlagOfEveryCommandIsOffered) {
  const std::regex flag("--[a-z][a-z-]*");
  for (const auto& command : commands()) {
    const std::string help = shim_help({command, "--help"});
    std::set<std::string> offered;
    for (const auto& word : words("shutdown-shim " + command + " --")) {
      offered.insert(word.ends_with('=') ? word.substr(0, word.size() - 1) : word);
    }
    for (std::sregex_iterator it(help.begin(), help.end(), flag), end; it != end; ++it) {
      EXPECT_THAT(offered, Contains(it->str())) << "shutdown-shim " << command;
    }
  }
}

TEST_F(BashCompletion, AfterDashDashTheWrappedCommand) {
  EXPECT_THAT(words("shutdown-shim --drain-delay=1s -- bas"), Contains("bash"));
  EXPECT_THAT(words("shutdown-shim -- bash --"), Not(Contains("--drain-delay=")));
}

}  // namespace
}  // namespace shim
