#include "shim_harness.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace shim_it {

namespace {

std::chrono::milliseconds left_until(std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()));
}

}  // namespace

double ms_between(std::uint64_t from_us, std::uint64_t to_us) {
  return (static_cast<double>(to_us) - static_cast<double>(from_us)) / 1000.0;
}

// --- apiserver ----------------------------------------------------------------------------------

std::vector<sandbox::timed_line> apiserver::signals() const {
  return sandbox::read_timed_lines(signal_log);
}

std::vector<sandbox::timed_line> apiserver::lifecycle() const {
  return sandbox::read_timed_lines(lifecycle_log);
}

std::optional<std::uint64_t> apiserver::lifecycle_at(const std::string& word) const {
  for (const auto& l : lifecycle()) {
    if (l.word == word) return l.usec;
  }
  return std::nullopt;
}

std::optional<pid_t> apiserver::pid() const {
  const std::string text = sandbox::read_text_file(pidfile);
  if (text.empty()) return std::nullopt;
  return static_cast<pid_t>(std::stol(text));
}

std::uint16_t apiserver::port() const {
  const std::string text = sandbox::read_text_file(port_file);
  return text.empty() ? 0 : static_cast<std::uint16_t>(std::stoul(text));
}

// --- shim ---------------------------------------------------------------------------------------

std::vector<sandbox::shim_event> shim::events() const { return sandbox::read_event_log(event_log); }

std::optional<sandbox::shim_event> shim::first_event(const std::string& name) const {
  for (auto& e : events()) {
    if (e.event == name) return e;
  }
  return std::nullopt;
}

std::size_t shim::count_events(const std::string& name) const {
  std::size_t n = 0;
  for (auto& e : events()) n += e.event == name ? 1 : 0;
  return n;
}

// --- reboot observation ------------------------------------------------------------------------

std::optional<double> reboot_observation::readyz_503_ms() const {
  if (!first_503_us) return std::nullopt;
  return ms_between(reboot_us, *first_503_us);
}

std::optional<double> reboot_observation::sigterm_ms() const {
  if (!sigterm_us) return std::nullopt;
  return ms_between(reboot_us, *sigterm_us);
}

std::optional<double> reboot_observation::reboot_target_ms() const {
  if (!start) return std::nullopt;
  return ms_between(reboot_us, start->usec);
}

std::string reboot_observation::figures_line() const {
  auto show = [](std::optional<double> v, double scale, int precision) {
    return v ? fmt::format("{:.{}f}", *v / scale, precision) : std::string("none");
  };
  return fmt::format("FIGURES readyz_503_ms={} sigterm_ms={} reboot_target_s={}",
                     show(readyz_503_ms(), 1, 1), show(sigterm_ms(), 1, 1),
                     show(reboot_target_ms(), 1000, 3));
}

shim_options attach_to(const apiserver& a, std::string drain_delay, std::string exit_timeout) {
  shim_options o;
  o.drain_delay = std::move(drain_delay);
  o.exit_timeout = std::move(exit_timeout);
  o.target = {"--target-pidfile=" + a.pidfile.string()};
  return o;
}

// --- fixture ------------------------------------------------------------------------------------

sandbox::node_sandbox& ShimTest::make_sandbox(sandbox::sandbox_options options) {
  if (sandbox_) throw std::logic_error("make_sandbox called twice in one test");
  sandbox_ = std::make_unique<sandbox::node_sandbox>(std::move(options));
  return *sandbox_;
}

sandbox::node_sandbox& ShimTest::sb() {
  if (!sandbox_) make_sandbox();
  return *sandbox_;
}

void ShimTest::note(const std::string& line) { notes_.push_back(line); }

void ShimTest::TearDown() {
  if (!HasFailure() || !sandbox_) return;
  std::ostringstream out;
  out << "\n===== diagnostics for the failed test =====\n";
  for (const auto& n : notes_) out << "note: " << n << "\n";
  for (const auto& s : shims_) {
    std::string cmd;
    for (const auto& a : s.argv) cmd += a + " ";
    out << "shim command: " << cmd << "\n";
    if (s.process) {
      out << "shim state: "
          << (s.process->running()
                  ? std::string("still running")
                  : sandbox::describe_wait_status(s.process->wait_status().value_or(0)))
          << "\n";
    }
  }
  try {
    out << "inhibitors now:\n";
    for (const auto& i : sandbox_->list_inhibitors()) {
      out << fmt::format("  {} {} {} {} uid={} pid={}\n", i.what, i.who, i.why, i.mode, i.uid,
                         i.pid);
    }
    out << "StartUnit calls:\n";
    for (const auto& c : sandbox_->start_unit_calls()) {
      out << fmt::format("  {} {} at {}\n", c.unit, c.mode, c.usec);
    }
  } catch (const std::exception& e) {
    out << "(cannot query the bus: " << e.what() << ")\n";
  }
  // The shim's log, its event log, logind's log and the rest, each file named.
  sandbox_->dump_logs(out, 150);
  std::cerr << out.str();
}

apiserver ShimTest::describe_apiserver(const std::string& name, const apiserver_options& options) {
  apiserver a;
  a.name = name;
  a.pidfile = sb().path(name + ".pid");
  a.port_file = sb().path(name + ".port");
  a.signal_log = sb().path(name + "-signals.log");
  a.lifecycle_log = sb().path(name + "-lifecycle.log");
  a.argv = {sb().tools().fake_apiserver,
            "--listen=127.0.0.1:0",
            "--port-file=" + a.port_file.string(),
            "--pidfile=" + a.pidfile.string(),
            "--signal-log=" + a.signal_log.string(),
            "--lifecycle-log=" + a.lifecycle_log.string(),
            "--shutdown-delay-duration=" + options.shutdown_delay,
            "--name=" + name};
  if (options.ignore_sigterm) a.argv.push_back("--ignore-sigterm");
  for (const auto& x : options.extra) a.argv.push_back(x);
  // Fresh files for each instance, so counts and waits concern this one.
  std::error_code ec;
  for (const auto& p : {a.pidfile, a.port_file, a.signal_log, a.lifecycle_log}) {
    std::filesystem::remove(p, ec);
  }
  return a;
}

std::string ShimTest::wait_check_line(const shim& s, const std::string& check,
                                      const std::string& text) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = wait_shim_answer(s, "/readyz?verbose")) {
      line = readyz_check_line(r->body, check).value_or("");
      if (line.find(text) != std::string::npos) return line;
    }
    std::this_thread::sleep_for(20ms);
  }
  return line;
}

std::optional<double> ShimTest::shim_metric(const shim& s, const std::string& name) {
  auto r = wait_shim_answer(s, "/metrics");
  return r ? metric_value(r->body, name) : std::nullopt;
}

bool ShimTest::wait_apiserver_listening(const apiserver& a, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (a.port() == 0 || !a.pid()) {
    if (a.process && !a.process->running()) return false;
    if (left_until(deadline).count() == 0) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

apiserver ShimTest::start_apiserver(const std::string& name, const apiserver_options& options) {
  apiserver a = describe_apiserver(name, options);
  a.process = &sb().spawn(name, a.argv);
  if (!wait_apiserver_listening(a)) {
    ADD_FAILURE() << "fake_apiserver " << name << " did not start listening";
  }
  return a;
}

shim ShimTest::start_shim(const shim_options& options, bool wait_ready) {
  shim s;
  s.port = sandbox::pick_free_port();
  s.event_log = sb().path("shim-events.jsonl");
  s.log = sb().log_path("shutdown-shim");
  s.argv = options.launcher;
  s.argv.insert(s.argv.end(),
                {sb().tools().shim, fmt::format("--listen=127.0.0.1:{}", s.port),
                 "--drain-delay=" + options.drain_delay, "--exit-timeout=" + options.exit_timeout,
                 "--signal=" + options.signal, "--inhibit=" + options.inhibit,
                 "--forward-on-sigterm=" + options.forward_on_sigterm,
                 "--event-log=" + s.event_log.string(), "--log-format=json"});
  if (!options.signal_delay.empty()) s.argv.push_back("--signal-delay=" + options.signal_delay);
  for (const auto& f : options.extra_flags) s.argv.push_back(f);
  for (const auto& t : options.target) s.argv.push_back(t);
  if (!options.wrapped_command.empty()) {
    s.argv.push_back("--");
    for (const auto& c : options.wrapped_command) s.argv.push_back(c);
  }
  s.env = options.extra_env;
  // The record of signalled processes in the sandbox, not the machine's /run/shutdown-shim (where
  // every test's shim wrote it before, and read other tests' records: "an earlier run signalled
  // processes that still run" in a fresh sandbox).
  if (std::none_of(s.env.begin(), s.env.end(),
                   [](const std::string& e) { return e.starts_with("RUNTIME_DIRECTORY="); })) {
    s.env.push_back("RUNTIME_DIRECTORY=" + runtime_dir().string());
  }
  s.process = &sb().spawn("shutdown-shim", s.argv, s.env);
  shims_.push_back(s);
  if (wait_ready && !wait_shim_ready(s)) {
    ADD_FAILURE() << "the shim did not become ready (/readyz 200) on port " << s.port;
  }
  return s;
}

std::filesystem::path ShimTest::runtime_dir() {
  const auto dir = sb().path("runtime");
  std::filesystem::create_directories(dir);
  return dir;
}

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

cli_run ShimTest::run_cli(const std::vector<std::string>& args,
                          const std::vector<sandbox::bind_mount>& mounts) {
  const auto out = sb().path(fmt::format("cli-{}.out", cli_runs_));
  const auto err = sb().path(fmt::format("cli-{}.err", cli_runs_));
  ++cli_runs_;
  std::vector<std::string> argv{sb().tools().shim};
  argv.insert(argv.end(), args.begin(), args.end());
  sandbox::spawn_options options;
  options.env = sb().child_environment();
  options.stdout_path = out;
  options.stderr_path = err;
  options.private_mounts = mounts;
  sandbox::child_process cli("shutdown-shim-" + args.front(), argv, options);
  const auto status = cli.wait_for_exit(kEventTimeout);
  cli_run r;
  if (status) r.exit_code = sandbox::shell_exit_code(*status);
  r.out = slurp(out);
  r.err = slurp(err);
  note(fmt::format("shutdown-shim {} exit {}:\n{}{}", fmt::join(args, " "), r.exit_code, r.out,
                   r.err));
  return r;
}

shim ShimTest::restart_shim(const shim& old, bool wait_ready) {
  shim s = old;
  s.process = &sb().spawn("shutdown-shim", s.argv, s.env);
  shims_.push_back(s);
  if (wait_ready && !wait_shim_ready(s)) {
    ADD_FAILURE() << "the restarted shim did not become ready (/readyz 200) on port " << s.port;
  }
  return s;
}

reboot_observation ShimTest::reboot_and_observe(const apiserver& target,
                                                sandbox::http_prober& prober) {
  reboot_observation r;
  r.reboot_us = sb().reboot();
  r.start = sb().wait_for_start_unit("reboot.target", kEventTimeout, r.reboot_us);
  prober.stop();
  r.first_503_us = prober.first_status_at(503, r.reboot_us);
  for (const auto& l : target.signals()) {
    if (l.usec >= r.reboot_us) {
      r.sigterm_us = l.usec;
      break;
    }
  }
  std::string changes;
  for (const auto& c : prober.changes()) {
    changes += fmt::format(" [{:+.1f} ms: {}]", ms_between(r.reboot_us, c.at_us),
                           c.status ? std::to_string(c.status) : c.error);
  }
  note(fmt::format("/readyz answers ({} probes):{}", prober.requests(), changes));
  return r;
}

void ShimTest::report(const reboot_observation& r) {
  const std::string line = r.figures_line();
  std::cout << line << std::endl;
  note(line);
  if (auto v = r.readyz_503_ms()) RecordProperty("readyz_503_ms", fmt::format("{:.1f}", *v));
  if (auto v = r.sigterm_ms()) RecordProperty("sigterm_ms", fmt::format("{:.1f}", *v));
  if (auto v = r.reboot_target_ms()) {
    RecordProperty("reboot_target_s", fmt::format("{:.3f}", *v / 1000));
  }
}

bool ShimTest::wait_shim_ready(const shim& s, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  sandbox::http_client client(s.port);
  for (;;) {
    auto r = client.get("/readyz", 1000ms);
    if (r.ok && r.status == 200) return true;
    if (!s.process->running()) {
      note("the shim exited before it was ready: " +
           sandbox::describe_wait_status(s.process->wait_status().value_or(0)));
      return false;
    }
    if (left_until(deadline).count() == 0) {
      note(r.ok ? fmt::format("last /readyz: {} {}", r.status, r.body)
                : "last /readyz: " + r.error);
      return false;
    }
    std::this_thread::sleep_for(20ms);
  }
}

std::optional<sandbox::http_result> ShimTest::wait_shim_answer(const shim& s,
                                                               const std::string& target,
                                                               std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  sandbox::http_client client(s.port);
  for (;;) {
    auto r = client.get(target, 1000ms);
    if (r.ok) return r;
    if (!s.process->running() || left_until(deadline).count() == 0) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
}

bool ShimTest::wait_shim_lock(bool present, std::chrono::milliseconds timeout) {
  return sb().wait_for_inhibitor("shutdown-shim", present, timeout);
}

bool ShimTest::wait_shim_lock_of(const shim& s, std::chrono::milliseconds timeout) {
  return sb().wait_for_inhibitor_of("shutdown-shim", s.process->pid(), timeout);
}

bool ShimTest::shim_lock_listed(const shim& s) {
  for (const auto& i : sb().list_inhibitors()) {
    if (i.who == "shutdown-shim" && i.mode == "delay" &&
        static_cast<pid_t>(i.pid) == s.process->pid()) {
      return true;
    }
  }
  return false;
}

bool ShimTest::wait_signal_count(const apiserver& a, std::size_t count,
                                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (a.signals().size() < count) {
    if (left_until(deadline).count() == 0) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::optional<sandbox::shim_event> ShimTest::wait_event(const shim& s, const std::string& name,
                                                        std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto e = s.first_event(name)) return e;
    if (left_until(deadline).count() == 0) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace shim_it
