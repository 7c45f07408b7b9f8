#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "event_log.hpp"

namespace shim {
namespace {

using namespace std::chrono_literals;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::StartsWith;

// "2026-11-29T16:36:07.123456Z". (No std::regex: GCC 12's trips -Wmaybe-uninitialized under ASan.)
bool is_timestamp(std::string_view s) {
  constexpr std::string_view shape = "dddd-dd-ddTdd:dd:dd.ddddddZ";
  if (s.size() != shape.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i]) return false;
  }
  return true;
}

// A text line as the logger writes it without the journal: timestamp, space, then rest.
bool is_stamped(std::string_view line, std::string_view rest) {
  constexpr std::size_t kStampLength = 27;
  return line.size() > kStampLength && is_timestamp(line.substr(0, kStampLength)) &&
         line[kStampLength] == ' ' && line.substr(kStampLength + 1) == rest;
}

// --- a strict little JSON reader for flat objects of strings and integers -----------------------

struct json_value {
  bool is_string = false;
  std::string text;  // the decoded string, or the integer's digits
};
using json_object = std::vector<std::pair<std::string, json_value>>;

class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}

  std::optional<json_object> object() {
    json_object out;
    if (!eat('{')) return std::nullopt;
    if (eat('}')) return done(out);
    do {
      auto key = string();
      if (!key || !eat(':')) return std::nullopt;
      json_value value;
      if (peek() == '"') {
        auto str = string();
        if (!str) return std::nullopt;
        value = {true, *str};
      } else {
        auto num = integer();
        if (!num) return std::nullopt;
        value = {false, *num};
      }
      out.emplace_back(*key, value);
    } while (eat(','));
    if (!eat('}')) return std::nullopt;
    return done(out);
  }

 private:
  std::optional<json_object> done(json_object& out) {
    if (i_ != s_.size()) return std::nullopt;
    return out;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  std::optional<std::string> integer() {
    std::string digits;
    if (peek() == '-') digits += s_[i_++];
    while (peek() >= '0' && peek() <= '9') digits += s_[i_++];
    if (digits.empty() || digits == "-") return std::nullopt;
    return digits;
  }
  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) return std::nullopt;  // raw control characters are not JSON
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      switch (s_[i_++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) return std::nullopt;
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f')
              cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              cp |= static_cast<unsigned>(h - 'A' + 10);
            else
              return std::nullopt;
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) return std::nullopt;  // not produced by us
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

json_object parse_object(std::string_view line) {
  auto parsed = json_reader(line).object();
  EXPECT_TRUE(parsed.has_value()) << "not a flat JSON object: " << line;
  return parsed.value_or(json_object{});
}

std::vector<std::string> keys(const json_object& o) {
  std::vector<std::string> out;
  for (const auto& [k, v] : o) out.push_back(k);
  return out;
}

const json_value& get(const json_object& o, std::string_view key) {
  for (const auto& [k, v] : o) {
    if (k == key) return v;
  }
  static const json_value missing;
  ADD_FAILURE() << "no key " << key;
  return missing;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Captures what a logger writes.
class memstream {
 public:
  memstream() : file_(open_memstream(&buffer_, &size_)) {}
  ~memstream() {
    std::fclose(file_);
    std::free(buffer_);
  }
  memstream(const memstream&) = delete;
  memstream& operator=(const memstream&) = delete;

  std::FILE* file() const { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buffer_, size_);
  }

 private:
  char* buffer_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

class temp_dir {
 public:
  temp_dir() {
    std::string pattern = ::testing::TempDir() + "event_log_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category());
    path_ = pattern;
  }
  ~temp_dir() {
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- json_escape, to_string, format_wall_time ---------------------------------------------------

TEST(JsonEscape, EscapesWhatJsonRequires) {
  EXPECT_EQ(json_escape(""), "");
  EXPECT_EQ(json_escape("plain text"), "plain text");
  EXPECT_EQ(json_escape(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(json_escape(R"(C:\dir)"), R"(C:\\dir)");
  EXPECT_EQ(json_escape("a\nb\tc\rd\be\ff"), R"(a\nb\tc\rd\be\ff)");
  EXPECT_EQ(json_escape(std::string_view("\x00\x01\x1f", 3)), R"(\u0000\u0001\u001f)");
  EXPECT_EQ(json_escape("/ \x7f"), "/ \x7f");  // JSON needs neither escaped
}

TEST(JsonEscape, PassesUtf8Through) {
  EXPECT_EQ(json_escape("\xc2\xb5s"), "\xc2\xb5s");                                // µs
  EXPECT_EQ(json_escape("\xe6\x97\xa5\xe6\x9c\xac"), "\xe6\x97\xa5\xe6\x9c\xac");  // 日本
  EXPECT_EQ(json_escape("\xf0\x9f\x98\x80!"), "\xf0\x9f\x98\x80!");                // U+1F600
  EXPECT_EQ(json_escape("\xef\xbf\xbf"), "\xef\xbf\xbf");                          // U+FFFF
  EXPECT_EQ(json_escape("\xf4\x8f\xbf\xbf"), "\xf4\x8f\xbf\xbf");                  // U+10FFFF
}

TEST(JsonEscape, ReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(json_escape("a\xff"
                        "b"),
            R"(a\ufffdb)");
  EXPECT_EQ(json_escape("\x80"), R"(\ufffd)");                                // stray continuation
  EXPECT_EQ(json_escape("\xc3"), R"(\ufffd)");                                // truncated
  EXPECT_EQ(json_escape("\xc3("), R"(\ufffd()");                              // bad continuation
  EXPECT_EQ(json_escape("\xc0\xaf"), R"(\ufffd\ufffd)");                      // overlong '/'
  EXPECT_EQ(json_escape("\xe0\x80\xaf"), R"(\ufffd\ufffd\ufffd)");            // overlong
  EXPECT_EQ(json_escape("\xed\xa0\x80"), R"(\ufffd\ufffd\ufffd)");            // surrogate
  EXPECT_EQ(json_escape("\xf4\x90\x80\x80"), R"(\ufffd\ufffd\ufffd\ufffd)");  // > U+10FFFF
  EXPECT_EQ(json_escape("\xe6\x97"), R"(\ufffd\ufffd)");  // truncated at the end
  // Whatever the input, the result reads back as a JSON string.
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string line = R"({"k":")" + json_escape(all) + R"("})";
  EXPECT_TRUE(json_reader(line).object().has_value());
}

TEST(EventKind, Names) {
  EXPECT_EQ(to_string(event_kind::Started), "Started");
  EXPECT_EQ(to_string(event_kind::InhibitorTaken), "InhibitorTaken");
  EXPECT_EQ(to_string(event_kind::ShutdownInitiated), "ShutdownInitiated");
  EXPECT_EQ(to_string(event_kind::SignalForwarded), "SignalForwarded");
  EXPECT_EQ(to_string(event_kind::TargetExited), "TargetExited");
  EXPECT_EQ(to_string(event_kind::DrainElapsed), "DrainElapsed");
  EXPECT_EQ(to_string(event_kind::InhibitorReleased), "InhibitorReleased");
  EXPECT_EQ(to_string(event_kind::ShutdownCancelled), "ShutdownCancelled");
  EXPECT_EQ(to_string(event_kind::BusLost), "BusLost");
  EXPECT_EQ(to_string(event_kind::BusRestored), "BusRestored");
  EXPECT_EQ(to_string(event_kind::InhibitDelayEnsured), "InhibitDelayEnsured");
}

TEST(FormatWallTime, Rfc3339UtcWithMicroseconds) {
  using namespace std::chrono;
  const sys_days day = year{2026} / November / 29;
  EXPECT_EQ(format_wall_time(day + 16h + 36min + 7s + 123456us), "2026-11-29T16:36:07.123456Z");
  EXPECT_EQ(format_wall_time(day + 16h + 36min + 7s + 123456789ns), "2026-11-29T16:36:07.123456Z");
  EXPECT_EQ(format_wall_time(system_clock::time_point{}), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(format_wall_time(system_clock::time_point{} - 1us), "1969-12-31T23:59:59.999999Z");
  EXPECT_TRUE(is_timestamp(format_wall_time(system_clock::now())));
  EXPECT_FALSE(is_timestamp("2026-11-29T16:36:07.12345Z"));
}

// --- logger --------------------------------------------------------------------------------------

TEST(Logger, TextLine) {
  memstream out;
  logger log(log_format::text, out.file(), false);
  log.info("message", {{"key", "value"}, {"key2", "quoted value"}});
  EXPECT_TRUE(is_stamped(out.text(), "INFO message key=value key2=\"quoted value\"\n"))
      << out.text();
}

TEST(Logger, TextLevelNames) {
  memstream out;
  logger log(log_format::text, out.file(), false);
  log.error("e");
  log.warning("w");
  log.notice("n");
  log.info("i");
  log.log(log_level::debug, "d");
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_TRUE(is_stamped(lines[0], "ERROR e")) << lines[0];
  EXPECT_TRUE(is_stamped(lines[1], "WARNING w")) << lines[1];
  EXPECT_TRUE(is_stamped(lines[2], "NOTICE n")) << lines[2];
  EXPECT_TRUE(is_stamped(lines[3], "INFO i")) << lines[3];
  EXPECT_TRUE(is_stamped(lines[4], "DEBUG d")) << lines[4];
}

TEST(Logger, TextQuotesAmbiguousValues) {
  memstream out;
  logger log(log_format::text, out.file(), true);
  log.info("m", {{"empty", ""},
                 {"eq", "a=b"},
                 {"quote", R"(say "hi")"},
                 {"nl", "a\nb"},
                 {"path", "/run/x.pid"},
                 {"utf8", "\xc2\xb5s"}});
  EXPECT_EQ(out.text(),
            "<6>m empty=\"\" eq=\"a=b\" quote=\"say \\\"hi\\\"\" nl=\"a\\nb\" path=/run/x.pid "
            "utf8=\xc2\xb5s\n");
}

TEST(Logger, TextMessageStaysOnOneLine) {
  memstream out;
  logger log(log_format::text, out.file(), true);
  log.warning("first\nsecond\tthird \"q\"");
  EXPECT_EQ(out.text(), "<4>first\\nsecond\\tthird \"q\"\n");
}

TEST(Logger, JournalPrefixText) {
  memstream out;
  logger log(log_format::text, out.file(), true);
  log.info("message", {{"key", "value"}});
  log.error("bad");
  log.notice("note");
  log.log(log_level::debug, "dbg");
  EXPECT_EQ(out.text(), "<6>message key=value\n<3>bad\n<5>note\n<7>dbg\n");
}

TEST(Logger, JsonLine) {
  memstream out;
  logger log(log_format::json, out.file(), false);
  log.notice("shutdown \"now\"", {{"cause", "PrepareForShutdown(true)"}, {"n", "3"}});
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "cause", "n"));
  EXPECT_TRUE(is_timestamp(get(o, "time").text));
  EXPECT_EQ(get(o, "level").text, "notice");
  EXPECT_EQ(get(o, "msg").text, "shutdown \"now\"");
  EXPECT_EQ(get(o, "cause").text, "PrepareForShutdown(true)");
  EXPECT_TRUE(get(o, "n").is_string);
  EXPECT_EQ(get(o, "n").text, "3");
}

TEST(Logger, JsonLevels) {
  memstream out;
  logger log(log_format::json, out.file(), false);
  log.error("e");
  log.warning("w");
  log.info("i");
  log.log(log_level::debug, "d");
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(get(parse_object(lines[0]), "level").text, "error");
  EXPECT_EQ(get(parse_object(lines[1]), "level").text, "warning");
  EXPECT_EQ(get(parse_object(lines[2]), "level").text, "info");
  EXPECT_EQ(get(parse_object(lines[3]), "level").text, "debug");
}

TEST(Logger, JournalPrefixJson) {
  memstream out;
  logger log(log_format::json, out.file(), true);
  log.warning("bus lost", {{"k", "v"}});
  const std::string text = out.text();
  ASSERT_THAT(text, StartsWith("<4>{"));
  ASSERT_EQ(text.back(), '\n');
  const json_object o = parse_object(std::string_view(text).substr(3, text.size() - 4));
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "k"));
  EXPECT_EQ(get(o, "level").text, "warning");
}

TEST(Logger, ConcurrentLinesDoNotInterleave) {
  memstream out;
  logger log(log_format::json, out.file(), false);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 200; ++i) {
        log.info("line", {{"thread", std::to_string(t)}, {"pad", std::string(300, 'x')}});
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 800u);
  for (const auto& line : lines) ASSERT_TRUE(json_reader(line).object().has_value()) << line;
}

// Runs f with stderr redirected to a file and JOURNAL_STREAM set to value (or unset), and returns
// what it wrote. value may contain "{dev}" and "{ino}", replaced by the file's.
std::string with_stderr_file(const std::string& value, bool set, const std::function<void()>& f) {
  temp_dir dir;
  const std::string path = dir.path() + "/stderr";
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(file, 0);
  struct stat st {};
  EXPECT_EQ(::fstat(file, &st), 0);
  std::string env = value;
  auto replace = [&](const std::string& what, const std::string& with) {
    if (auto p = env.find(what); p != std::string::npos) env.replace(p, what.size(), with);
  };
  replace("{dev}", std::to_string(st.st_dev));
  replace("{ino}", std::to_string(st.st_ino));

  const char* old_env = std::getenv("JOURNAL_STREAM");
  const std::optional<std::string> saved_env =
      old_env ? std::optional<std::string>(old_env) : std::nullopt;
  std::fflush(stderr);
  const int saved_stderr = ::dup(STDERR_FILENO);
  ::dup2(file, STDERR_FILENO);
  ::close(file);
  if (set) {
    ::setenv("JOURNAL_STREAM", env.c_str(), 1);
  } else {
    ::unsetenv("JOURNAL_STREAM");
  }

  f();

  std::fflush(stderr);
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  if (saved_env) {
    ::setenv("JOURNAL_STREAM", saved_env->c_str(), 1);
  } else {
    ::unsetenv("JOURNAL_STREAM");
  }
  return read_file(path);
}

TEST(Logger, ForStderrDetectsTheJournal) {
  auto log_once = [] { logger::for_stderr(log_format::text).info("hello", {{"k", "v"}}); };
  EXPECT_EQ(with_stderr_file("{dev}:{ino}", true, log_once), "<6>hello k=v\n");

  for (const std::string value :
       {"{dev}:1", "1:{ino}", "", "garbage", "{dev}:{ino}x", "{dev}:", ":{ino}", "{dev}-{ino}"}) {
    EXPECT_TRUE(is_stamped(with_stderr_file(value, true, log_once), "INFO hello k=v\n")) << value;
  }
  EXPECT_TRUE(is_stamped(with_stderr_file("", false, log_once), "INFO hello k=v\n"));
}

// --- event_recorder ------------------------------------------------------------------------------

TEST(EventRecorder, WritesOneJsonLineWithEveryKey) {
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  memstream out;
  logger log(log_format::text, out.file(), true);
  event_recorder events(log, path);

  timespec mono{};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  const auto before_us = mono.tv_sec * 1'000'000LL + mono.tv_nsec / 1'000;

  events.record(event_kind::SignalForwarded, "PrepareForShutdown(true)",
                "sent SIGTERM to \"kube-apiserver\"\n(pid 42)",
                {{"signal", "SIGTERM"}, {"pid_target", "42"}, {"note", "\xff"}});

  const std::string text = read_file(path);
  ASSERT_EQ(text.back(), '\n');
  const auto lines = split_lines(text);
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("event", "wall", "monotonic_us", "boottime_us", "pid", "cause",
                                   "message", "signal", "pid_target", "note"));
  EXPECT_EQ(get(o, "event").text, "SignalForwarded");
  EXPECT_TRUE(is_timestamp(get(o, "wall").text));
  EXPECT_FALSE(get(o, "monotonic_us").is_string);
  EXPECT_FALSE(get(o, "boottime_us").is_string);
  EXPECT_FALSE(get(o, "pid").is_string);
  const long long monotonic = std::stoll(get(o, "monotonic_us").text);
  EXPECT_GE(monotonic, before_us);
  EXPECT_LT(monotonic, before_us + 60'000'000);
  // The boot clock also counts suspend, so it is not behind the monotonic one (give or take the
  // microsecond some sandboxed kernels show).
  EXPECT_GE(std::stoll(get(o, "boottime_us").text), monotonic - 1'000'000);
  EXPECT_EQ(get(o, "pid").text, std::to_string(::getpid()));
  EXPECT_EQ(get(o, "cause").text, "PrepareForShutdown(true)");
  EXPECT_EQ(get(o, "message").text, "sent SIGTERM to \"kube-apiserver\"\n(pid 42)");
  EXPECT_EQ(get(o, "signal").text, "SIGTERM");
  EXPECT_TRUE(get(o, "pid_target").is_string);
  EXPECT_EQ(get(o, "note").text, "\xef\xbf\xbd");  // U+FFFD

  EXPECT_EQ(out.text(),
            "<5>sent SIGTERM to \"kube-apiserver\"\\n(pid 42) event=SignalForwarded "
            "cause=PrepareForShutdown(true) signal=SIGTERM pid_target=42 note=\xff\n");
}

TEST(EventRecorder, StampsTheMomentGivenOnEveryClock) {
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  memstream out;
  logger log(log_format::text, out.file(), true);
  event_recorder events(log, path);

  const auto at = std::chrono::steady_clock::now() - std::chrono::seconds(30);
  const auto at_us =
      std::chrono::duration_cast<std::chrono::microseconds>(at.time_since_epoch()).count();
  const auto wall_before = std::chrono::system_clock::now();
  events.record(event_kind::ShutdownInitiated, "PrepareForShutdown(true)", "unready", {}, at);
  events.record(event_kind::DrainElapsed, "timer", "drained");

  const auto lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 2u);
  const json_object earlier = parse_object(lines[0]);
  const json_object now = parse_object(lines[1]);
  const long long earlier_mono = std::stoll(get(earlier, "monotonic_us").text);
  const long long now_mono = std::stoll(get(now, "monotonic_us").text);
  EXPECT_GE(earlier_mono, at_us);
  EXPECT_LT(earlier_mono, at_us + 5'000'000) << "not the moment given";
  EXPECT_GE(now_mono - earlier_mono, 30'000'000);
  const long long boot_gap =
      std::stoll(get(now, "boottime_us").text) - std::stoll(get(earlier, "boottime_us").text);
  EXPECT_GE(boot_gap, 30'000'000 - 1'000'000);
  // Walls as text: the earlier one is about 30 s before the later one (same minute layout).
  EXPECT_LT(get(earlier, "wall").text, get(now, "wall").text);
  EXPECT_LT(get(earlier, "wall").text, format_wall_time(wall_before));
}

TEST(EventRecorder, ExtraFieldsNeverShadowFixedKeys) {
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  memstream out;
  logger log(log_format::text, out.file(), true);
  event_recorder events(log, path);
  events.record(event_kind::TargetExited, "pidfd", "the target exited",
                {{"pid", "42"}, {"event", "x"}, {"message", "y"}, {"exit_code", "0"}});
  const json_object o = parse_object(split_lines(read_file(path)).at(0));
  EXPECT_THAT(keys(o),
              ElementsAre("event", "wall", "monotonic_us", "boottime_us", "pid", "cause", "message",
                          "field_pid", "field_event", "field_message", "exit_code"));
  EXPECT_EQ(get(o, "pid").text, std::to_string(::getpid()));
  EXPECT_EQ(get(o, "field_pid").text, "42");
  EXPECT_EQ(get(o, "event").text, "TargetExited");
  // The log line is the caller's fields as given.
  EXPECT_THAT(out.text(),
              StartsWith("<6>the target exited event=TargetExited cause=pidfd pid=42 "));
}

TEST(EventRecorder, LogsAtTheEventsLevel) {
  memstream out;
  logger log(log_format::text, out.file(), true);
  event_recorder events(log, "");
  events.record(event_kind::Started, "", "started");
  events.record(event_kind::InhibitorTaken, "", "");
  events.record(event_kind::ShutdownInitiated, "SIGTERM", "draining");
  events.record(event_kind::SignalForwarded, "c", "m");
  events.record(event_kind::InhibitorReleased, "c", "m");
  events.record(event_kind::BusLost, "c", "m");
  events.record(event_kind::BusRestored, "c", "m");
  EXPECT_THAT(
      split_lines(out.text()),
      ElementsAre("<6>started event=Started", "<6>InhibitorTaken event=InhibitorTaken",
                  "<5>draining event=ShutdownInitiated cause=SIGTERM",
                  "<5>m event=SignalForwarded cause=c", "<5>m event=InhibitorReleased cause=c",
                  "<4>m event=BusLost cause=c", "<6>m event=BusRestored cause=c"));
}

TEST(EventRecorder, AppendsAcrossInstances) {
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  { std::ofstream(path) << "{\"event\":\"Earlier\"}\n"; }
  memstream out;
  logger log(log_format::json, out.file(), false);
  {
    event_recorder first(log, path);
    first.record(event_kind::Started, "", "one");
  }
  {
    event_recorder second(log, path);
    second.record(event_kind::ShutdownInitiated, "SIGTERM", "two");
    second.record(event_kind::DrainElapsed, "timer", "three");
  }
  const auto lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "{\"event\":\"Earlier\"}");
  EXPECT_EQ(get(parse_object(lines[1]), "message").text, "one");
  EXPECT_EQ(get(parse_object(lines[2]), "message").text, "two");
  EXPECT_EQ(get(parse_object(lines[3]), "event").text, "DrainElapsed");
  EXPECT_LE(std::stoll(get(parse_object(lines[1]), "monotonic_us").text),
            std::stoll(get(parse_object(lines[3]), "monotonic_us").text));
}

TEST(EventRecorder, CreatesTheFileAppendOnlyCloseOnExec) {
  temp_dir dir;
  const std::string path = dir.path() + "/events.jsonl";
  memstream out;
  logger log(log_format::text, out.file(), false);
  const mode_t old_umask = ::umask(0);
  event_recorder events(log, path);
  ::umask(old_umask);

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // Find our descriptor for the file to check its flags: the child in wrapper mode must not get it.
  int found = -1;
  for (int fd = 0; fd < 1024; ++fd) {
    char link[4096];
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(proc.c_str(), link, sizeof link);
    if (n > 0 && std::string(link, static_cast<std::size_t>(n)) == path) found = fd;
  }
  ASSERT_GE(found, 0);
  EXPECT_TRUE(::fcntl(found, F_GETFD) & FD_CLOEXEC);
  const int flags = ::fcntl(found, F_GETFL);
  EXPECT_TRUE(flags & O_APPEND);
  EXPECT_EQ(flags & O_ACCMODE, O_WRONLY);
}

TEST(EventRecorder, UnopenablePathThrowsNamingIt) {
  temp_dir dir;
  memstream out;
  logger log(log_format::text, out.file(), false);
  const std::string missing = dir.path() + "/no/such/dir/events.jsonl";
  try {
    event_recorder events(log, missing);
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), StartsWith("open event log " + missing + ": "));
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
  try {
    event_recorder events(log, dir.path());  // a directory cannot be opened for writing
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.path()));
    EXPECT_EQ(e.code(), std::errc::is_a_directory);
  }
}

TEST(EventRecorder, WriteFailureIsLoggedNotThrown) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  memstream out;
  logger log(log_format::text, out.file(), true);
  event_recorder events(log, "/dev/full");
  EXPECT_NO_THROW(events.record(event_kind::ShutdownInitiated, "SIGTERM", "draining"));
  EXPECT_THAT(split_lines(out.text()),
              ElementsAre("<3>cannot write to the event log event=ShutdownInitiated "
                          "error=\"No space left on device\"",
                          "<5>draining event=ShutdownInitiated cause=SIGTERM"));
}

TEST(EventRecorder, WithoutPathOnlyLogs) {
  memstream out;
  logger log(log_format::json, out.file(), false);
  event_recorder events(log, "");
  events.record(event_kind::TargetExited, "pidfd", "exited", {{"status", "0"}});
  const auto lines = split_lines(out.text());
  ASSERT_EQ(lines.size(), 1u);
  const json_object o = parse_object(lines[0]);
  EXPECT_THAT(keys(o), ElementsAre("time", "level", "msg", "event", "cause", "status"));
  EXPECT_EQ(get(o, "event").text, "TargetExited");
  EXPECT_EQ(get(o, "level").text, "info");
}

}  // namespace
}  // namespace shim
