// shim::upstream_probe against fake_apiserver over HTTP and HTTPS (certificates made at test time
// by sandbox::test_pki): each outcome the shim's upstream check depends on, with its reason. No
// bus, no logind: the probe runs on an io_context in this process, the stand-in apiserver in a
// child. Times are never asserted from above (shared, noisy machines); only orderings and lower
// bounds that the probe itself promises.

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http_probe.hpp"
#include "node_sandbox.hpp"
#include "process.hpp"
#include "test_pki.hpp"
#include "upstream/upstream_probe.hpp"
#include "upstream/upstream_settings.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using sandbox::write_file_atomically;
using shim::probe_failure;
using shim::probe_outcome;
using shim::upstream_settings;

constexpr auto kStartTimeout = 10s;
// Bound on one run of probes: far above anything these tests wait for.
constexpr auto kRunDeadline = 30s;
constexpr auto kInterval = 50ms;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct timed_outcome {
  probe_outcome outcome{};
  std::chrono::steady_clock::time_point started{};  // finished - duration
  std::chrono::steady_clock::time_point finished{};
};

// One fake_apiserver child and its files.
struct fake_apiserver {
  sandbox::child_process process;
  std::uint16_t port = 0;
  fs::path control;         // --readyz-control
  fs::path token;           // --token-file, when required
  fs::path connection_log;  // ACCEPTED lines

  void readyz(const std::string& mode) { write_file_atomically(control, mode + "\n"); }
  unsigned connections() const {
    unsigned n = 0;
    for (const auto& l : sandbox::read_timed_lines(connection_log)) n += l.word == "ACCEPTED";
    return n;
  }
  // The TLS handshakes that succeeded, in order: "full" or "resumed".
  std::vector<std::string> handshakes() const {
    std::vector<std::string> out;
    for (const auto& l : sandbox::read_timed_lines(connection_log)) {
      if (l.word == "HANDSHAKE") out.push_back(l.detail);
    }
    return out;
  }
  std::vector<std::string> handshake_failures() const {
    std::vector<std::string> out;
    for (const auto& l : sandbox::read_timed_lines(connection_log)) {
      if (l.word == "HANDSHAKE_FAILED") out.push_back(l.detail);
    }
    return out;
  }
};

class UpstreamProbe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char templ[] = "/tmp/upstream-probe-test.XXXXXX";
    ASSERT_TRUE(mkdtemp(templ));
    suite_dir_ = new fs::path(templ);
    sandbox::register_cleanup_dir(*suite_dir_);
    pki_ = new sandbox::test_pki(sandbox::test_pki::make(*suite_dir_));
  }
  static void TearDownTestSuite() {
    if (!suite_dir_) return;
    sandbox::unregister_cleanup_dir(*suite_dir_);
    if (!std::getenv("SANDBOX_KEEP")) fs::remove_all(*suite_dir_);
    delete pki_;
    delete suite_dir_;
    pki_ = nullptr;
    suite_dir_ = nullptr;
  }

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = *suite_dir_ / info->name();
    fs::create_directories(dir_);
  }

  const sandbox::test_pki& pki() const { return *pki_; }
  fs::path path(const std::string& name) const { return dir_ / name; }

  struct fake_options {
    std::optional<sandbox::cert_and_key> tls{};  // HTTPS with this certificate
    bool client_ca = false;                      // --client-ca-file=pki.client_ca
    bool require_client_cert = false;
    std::string token{};  // required bearer token, when not empty
    std::uint16_t port = 0;
    bool close_connections = false;
  };

  // Starts fake_apiserver and waits until it listens.
  fake_apiserver start_fake(const fake_options& o) {
    fake_apiserver f;
    const fs::path port_file = path("apiserver.port");
    fs::remove(port_file);
    f.control = path("readyz-control");
    // One log per instance: a test that starts several counts each one's connections.
    f.connection_log = path(fmt::format("connections-{}.log", ++fakes_started_));
    std::vector<std::string> argv{
        sandbox::tool_paths::from_environment().fake_apiserver,
        "--listen=127.0.0.1:" + std::to_string(o.port), "--port-file=" + port_file.string(),
        "--connection-log=" + f.connection_log.string(), "--readyz-control=" + f.control.string()};
    if (o.tls) {
      argv.push_back("--tls-cert-file=" + o.tls->cert.string());
      argv.push_back("--tls-private-key-file=" + o.tls->key.string());
    }
    if (o.client_ca) argv.push_back("--client-ca-file=" + pki().client_ca.string());
    if (o.require_client_cert) argv.push_back("--require-client-cert");
    if (o.close_connections) argv.push_back("--close-connections");
    if (!o.token.empty()) {
      f.token = path("apiserver-token");
      write_file_atomically(f.token, o.token + "\n");
      argv.push_back("--token-file=" + f.token.string());
    }
    sandbox::spawn_options spawn;
    spawn.stdout_path = path("apiserver.log");
    f.process = sandbox::child_process("fake_apiserver", argv, spawn);
    const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    while (f.port == 0 && std::chrono::steady_clock::now() < deadline && f.process.running()) {
      const std::string text = read_file(port_file);
      if (!text.empty()) f.port = static_cast<std::uint16_t>(std::stoul(text));
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_NE(f.port, 0) << "fake_apiserver did not listen: " << read_file(path("apiserver.log"));
    return f;
  }

  upstream_settings settings(const std::string& url) const {
    upstream_settings s;
    const auto parsed = shim::parse_upstream_url(url);
    EXPECT_TRUE(parsed) << url << ": " << parsed.error();
    if (parsed) s.url = parsed.value();
    s.interval = kInterval;
    s.timeout = 2s;
    return s;
  }
  // For the tests that run over both: the good server certificate, or none.
  std::optional<sandbox::cert_and_key> server_cert_if(bool tls) const {
    return tls ? std::optional(pki().server) : std::nullopt;
  }
  upstream_settings http_or_https(const fake_apiserver& f, bool tls) const {
    return tls ? https(f) : settings("http://127.0.0.1:" + std::to_string(f.port) + "/readyz");
  }
  upstream_settings https(const fake_apiserver& f, const std::string& host = "127.0.0.1") const {
    auto s = settings("https://" + host + ":" + std::to_string(f.port) + "/readyz");
    s.ca_file = pki().ca.string();
    return s;
  }

  // Runs a probe until it has reported `count` outcomes; after(i) runs inside the handler of the
  // i-th (from 0), as a test's action between two probes.
  std::vector<timed_outcome> run_probes(const upstream_settings& s, unsigned count,
                                        const std::function<void(unsigned)>& after = {}) {
    boost::asio::io_context io;
    std::vector<timed_outcome> seen;
    std::unique_ptr<shim::upstream_probe> probe;
    probe = std::make_unique<shim::upstream_probe>(io, s, [&](const probe_outcome& o) {
      const auto now = std::chrono::steady_clock::now();
      seen.push_back({.outcome = o, .started = now - o.duration, .finished = now});
      if (after) after(static_cast<unsigned>(seen.size() - 1));
      if (seen.size() >= count) {
        probe->stop();
        io.stop();
      }
    });
    boost::asio::steady_timer deadline(io, kRunDeadline);
    deadline.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) io.stop();
    });
    probe->start();
    io.run();
    probe.reset();
    EXPECT_EQ(seen.size(), count) << "the probe reported fewer outcomes than expected";
    return seen;
  }

  probe_outcome probe_once(const upstream_settings& s) {
    const auto seen = run_probes(s, 1);
    return seen.empty() ? probe_outcome{.error = "no outcome"} : seen.front().outcome;
  }

 private:
  static inline fs::path* suite_dir_ = nullptr;
  static inline sandbox::test_pki* pki_ = nullptr;
  fs::path dir_;
  unsigned fakes_started_ = 0;
};

void expect_pass(const probe_outcome& o) {
  EXPECT_TRUE(o.pass()) << shim::to_string(o.failure) << ": " << o.error;
  EXPECT_EQ(o.status, 200u);
  EXPECT_EQ(o.error, "");
}

void expect_failure(const probe_outcome& o, probe_failure failure, const std::string& error) {
  EXPECT_EQ(o.failure, failure) << shim::to_string(o.failure) << ": " << o.error;
  EXPECT_EQ(o.error, error);
}

TEST_F(UpstreamProbe, PlainHttpPasses) {
  auto f = start_fake({});
  expect_pass(probe_once(settings("http://127.0.0.1:" + std::to_string(f.port) + "/readyz")));
  expect_pass(probe_once(settings("http://localhost:" + std::to_string(f.port) + "/readyz")));
}

TEST_F(UpstreamProbe, PlainHttpToTheTlsPortIsAFailure) {
  // The real server (Go's net/http) answers "400 Bad Request" to plain HTTP on its TLS port.
  auto f = start_fake({.tls = pki().server});
  const auto o = probe_once(settings("http://127.0.0.1:" + std::to_string(f.port) + "/readyz"));
  expect_failure(o, probe_failure::status, "status 400");
}

TEST_F(UpstreamProbe, GoodCaPassesByIpAndByName) {
  auto f = start_fake({.tls = pki().server});
  expect_pass(probe_once(https(f, "127.0.0.1")));
  expect_pass(probe_once(https(f, "localhost")));
}

TEST_F(UpstreamProbe, WrongCaFailsWithOpensslsReason) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.ca_file = pki().other_ca.string();
  expect_failure(probe_once(s), probe_failure::tls,
                 "certificate verify failed: unable to get local issuer certificate");
}

TEST_F(UpstreamProbe, WrongHostNameFails) {
  auto f = start_fake({.tls = pki().wrong_name});
  expect_failure(probe_once(https(f, "localhost")), probe_failure::tls,
                 "certificate verify failed: hostname mismatch");
  expect_failure(probe_once(https(f, "127.0.0.1")), probe_failure::tls,
                 "certificate verify failed: IP address mismatch");
}

TEST_F(UpstreamProbe, ExpiredCertificateFails) {
  auto f = start_fake({.tls = pki().expired});
  expect_failure(probe_once(https(f)), probe_failure::tls,
                 "certificate verify failed: certificate has expired");
}

TEST_F(UpstreamProbe, ServerNameOverrideIsWhatIsVerified) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f, "127.0.0.1");
  s.server_name = "kubernetes";
  expect_pass(probe_once(s));
  s.server_name = "elsewhere.example";
  expect_failure(probe_once(s), probe_failure::tls, "certificate verify failed: hostname mismatch");
}

TEST_F(UpstreamProbe, InsecureSkipVerifyPassesWhateverTheCertificate) {
  for (const auto& cert : {pki().expired, pki().wrong_name}) {
    auto f = start_fake({.tls = cert});
    auto s = https(f);
    s.ca_file = pki().other_ca.string();
    s.insecure_skip_verify = true;
    expect_pass(probe_once(s));
  }
}

TEST_F(UpstreamProbe, MutualTlsRequired) {
  auto f = start_fake({.tls = pki().server, .client_ca = true, .require_client_cert = true});
  auto s = https(f);
  const auto without = probe_once(s);
  EXPECT_EQ(without.failure, probe_failure::tls) << without.error;
  EXPECT_NE(without.error.find("certificate required"), std::string::npos) << without.error;

  s.client_cert = pki().stray_client.cert.string();
  s.client_key = pki().stray_client.key.string();
  const auto stray = probe_once(s);
  EXPECT_EQ(stray.failure, probe_failure::tls) << stray.error;

  s.client_cert = pki().client.cert.string();
  s.client_key = pki().client.key.string();
  expect_pass(probe_once(s));
}

TEST_F(UpstreamProbe, ClientCertificateIsOptionalWhenNotRequired) {
  // kube-apiserver's default with --client-ca-file: requested, verified only when sent.
  auto f = start_fake({.tls = pki().server, .client_ca = true});
  expect_pass(probe_once(https(f)));
}

TEST_F(UpstreamProbe, TokenRequired) {
  auto f = start_fake({.tls = pki().server, .token = "first-token"});
  auto s = https(f);
  const auto anonymous = probe_once(s);
  expect_failure(anonymous, probe_failure::status, "status 401");
  EXPECT_EQ(anonymous.status, 401u);

  s.token_file = path("token").string();
  write_file_atomically(s.token_file, "wrong-token\n");
  expect_failure(probe_once(s), probe_failure::status, "status 401");

  write_file_atomically(s.token_file, "  first-token\n\n");  // trimmed
  expect_pass(probe_once(s));
}

TEST_F(UpstreamProbe, RotatedTokenIsReadAgain) {
  auto f = start_fake({.tls = pki().server, .token = "token-one"});
  auto s = https(f);
  s.token_file = path("token").string();
  write_file_atomically(s.token_file, "token-one");
  const auto seen = run_probes(s, 4, [&](unsigned i) {
    // Both sides switch between two probes: the old token would now be a 401.
    if (i == 0) {
      write_file_atomically(f.token, "token-two");
      write_file_atomically(s.token_file, "token-two");
    }
    if (i == 2) {
      // Rewritten in place (same inode), as a hand edit does.
      write_file_atomically(f.token, "token-3");
      std::ofstream(s.token_file, std::ios::trunc) << "token-3";
    }
  });
  for (const auto& o : seen) expect_pass(o.outcome);
  EXPECT_EQ(f.connections(), 1u) << "a new token needs no new connection";
}

TEST_F(UpstreamProbe, Status500IsAFailure) {
  auto f = start_fake({.tls = pki().server});
  f.readyz("500");
  const auto o = probe_once(https(f));
  expect_failure(o, probe_failure::status, "status 500");
  EXPECT_EQ(o.status, 500u);
}

TEST_F(UpstreamProbe, HangIsATimeout) {
  auto f = start_fake({.tls = pki().server});
  f.readyz("hang");
  auto s = https(f);
  s.timeout = 300ms;
  const auto o = probe_once(s);
  expect_failure(o, probe_failure::timeout, "timeout after 300ms");
  EXPECT_GE(o.duration, s.timeout);
}

TEST_F(UpstreamProbe, ConnectionRefused) {
  const auto port = sandbox::pick_free_port();
  expect_failure(probe_once(settings("http://127.0.0.1:" + std::to_string(port) + "/readyz")),
                 probe_failure::refused, "connection refused");
  expect_failure(probe_once(settings("https://localhost:" + std::to_string(port) + "/readyz")),
                 probe_failure::refused, "connection refused");
}

TEST_F(UpstreamProbe, KeepAliveAcrossProbes) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "https" : "http");
    auto f = start_fake({.tls = server_cert_if(tls)});
    const auto s = http_or_https(f, tls);
    const auto seen = run_probes(s, 5, [&](unsigned i) {
      if (i == 1) f.readyz("500");  // an answer other than 200 keeps the connection
      if (i == 2) f.readyz("200");
    });
    ASSERT_EQ(seen.size(), 5u);
    EXPECT_EQ(seen[2].outcome.failure, probe_failure::status);
    EXPECT_TRUE(seen[4].outcome.pass());
    EXPECT_EQ(f.connections(), 1u) << "five probes, one connection";
  }
}

TEST_F(UpstreamProbe, ServerThatClosesEachConnection) {
  // "Connection: close" on every answer: each probe on a new connection, none a failure.
  auto f = start_fake({.tls = pki().server, .close_connections = true});
  const auto seen = run_probes(https(f), 3);
  for (const auto& o : seen) expect_pass(o.outcome);
  EXPECT_EQ(f.connections(), 3u);
}

// A server that closes every connection costs a TLS handshake per probe: after the first, each one
// resumes the session from the server's last ticket.
TEST_F(UpstreamProbe, ReconnectionsResumeTheTlsSession) {
  auto f = start_fake({.tls = pki().server, .close_connections = true});
  const auto seen = run_probes(https(f), 4);
  for (const auto& o : seen) expect_pass(o.outcome);
  EXPECT_EQ(f.connections(), 4u);
  EXPECT_EQ(f.handshakes(), (std::vector<std::string>{"full", "resumed", "resumed", "resumed"}));
}

TEST_F(UpstreamProbe, ANewProbeOffersNoSession) {
  // Another URL is another probe (the shim's settings are fixed): it starts with a full handshake.
  auto f = start_fake({.tls = pki().server, .close_connections = true});
  expect_pass(probe_once(https(f, "127.0.0.1")));
  expect_pass(probe_once(https(f, "localhost")));
  EXPECT_EQ(f.handshakes(), (std::vector<std::string>{"full", "full"}));
}

// The CA file is changed for one that does not sign the server's certificate: the next probe must
// fail as a full handshake would, never pass on the session made under the old trust.
TEST_F(UpstreamProbe, AChangedCaFileIsNotBypassedByTheSession) {
  auto f = start_fake({.tls = pki().server, .close_connections = true});
  auto s = https(f);
  s.ca_file = path("ca.crt").string();
  write_file_atomically(s.ca_file, read_file(pki().ca));
  const auto seen = run_probes(s, 5, [&](unsigned i) {
    if (i == 1) write_file_atomically(s.ca_file, read_file(pki().other_ca));
    if (i == 3) write_file_atomically(s.ca_file, read_file(pki().ca));
  });
  ASSERT_EQ(seen.size(), 5u);
  expect_pass(seen[0].outcome);
  expect_pass(seen[1].outcome);
  for (unsigned i : {2u, 3u}) {
    expect_failure(seen[i].outcome, probe_failure::tls,
                   "certificate verify failed: unable to get local issuer certificate");
  }
  expect_pass(seen[4].outcome);
  EXPECT_EQ(f.handshakes(), (std::vector<std::string>{"full", "resumed", "full"}));
}

TEST_F(UpstreamProbe, AFailedProbeDropsTheSession) {
  auto f = start_fake({.tls = pki().server, .close_connections = true});
  auto s = https(f);
  s.timeout = 300ms;
  const auto seen = run_probes(s, 4, [&](unsigned i) {
    if (i == 0) f.readyz("hang");
    if (i == 1) f.readyz("200");
  });
  ASSERT_EQ(seen.size(), 4u);
  expect_pass(seen[0].outcome);
  expect_failure(seen[1].outcome, probe_failure::timeout, "timeout after 300ms");
  expect_pass(seen[2].outcome);
  expect_pass(seen[3].outcome);
  EXPECT_EQ(f.handshakes(), (std::vector<std::string>{"full", "resumed", "full", "resumed"}))
      << "after a failure the next connection is verified in full";
}

TEST_F(UpstreamProbe, StoppedApiserverIsATimeoutThenPassesAgain) {
  // SIGSTOP: the kernel still completes TCP handshakes, nothing answers (TLS nor HTTP), on the
  // kept-alive connection and on a new one alike.
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.timeout = 300ms;
  const auto seen = run_probes(s, 4, [&](unsigned i) {
    if (i == 0) f.process.signal(SIGSTOP);
    if (i == 2) f.process.signal(SIGCONT);
  });
  ASSERT_EQ(seen.size(), 4u);
  expect_pass(seen[0].outcome);
  expect_failure(seen[1].outcome, probe_failure::timeout, "timeout after 300ms");
  expect_failure(seen[2].outcome, probe_failure::timeout, "timeout after 300ms");
  expect_pass(seen[3].outcome);
}

TEST_F(UpstreamProbe, NewConnectionAfterATimeout) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.timeout = 300ms;
  f.readyz("hang");
  const auto seen = run_probes(s, 3, [&](unsigned i) {
    if (i == 0) f.readyz("200");
  });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].outcome.failure, probe_failure::timeout);
  expect_pass(seen[1].outcome);
  expect_pass(seen[2].outcome);
  EXPECT_EQ(f.connections(), 2u) << "the timed-out connection is dropped, the next one kept";
}

TEST_F(UpstreamProbe, RestartedApiserverPassesAtTheFirstProbe) {
  // kube-apiserver restarts (a static-pod revision): the kept-alive connection is dead, which
  // the next probe finds out only when it uses it. One retry on a new connection, within the
  // same timeout, makes that probe a pass rather than a spurious failure.
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "https" : "http");
    auto f = start_fake({.tls = server_cert_if(tls)});
    const auto s = http_or_https(f, tls);
    const auto port = f.port;
    const auto seen = run_probes(s, 3, [&](unsigned i) {
      if (i != 0) return;
      f.process.stop();
      f = start_fake({.tls = server_cert_if(tls), .port = port});
    });
    for (const auto& o : seen) expect_pass(o.outcome);
  }
}

TEST_F(UpstreamProbe, MissingCaFileIsRetriedUntilItAppears) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.ca_file = path("ca-later.crt").string();
  const auto seen = run_probes(s, 4, [&](unsigned i) {
    if (i == 1) fs::copy_file(pki().ca, s.ca_file);
  });
  ASSERT_EQ(seen.size(), 4u);
  for (unsigned i : {0u, 1u}) {
    expect_failure(seen[i].outcome, probe_failure::config,
                   s.ca_file + ": No such file or directory");
  }
  expect_pass(seen[2].outcome);
  expect_pass(seen[3].outcome);
  EXPECT_EQ(f.connections(), 1u) << "no connection while the CA is missing";
}

TEST_F(UpstreamProbe, UnusableCaFileIsAConfigFailureNamingIt) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.ca_file = path("garbage.crt").string();
  std::ofstream(s.ca_file) << "not a certificate\n";
  const auto o = probe_once(s);
  EXPECT_EQ(o.failure, probe_failure::config) << o.error;
  EXPECT_TRUE(o.error.starts_with("CA file " + s.ca_file + ": ")) << o.error;
}

// Issue 18, item 6: an unusable CA file was parsed again at every probe, on the loop (a 256 MB
// non-PEM file: /readyz p99 142 ms). Now its error stands until the file changes. The proof: the
// file is rewritten in place with a good CA of the same size and its mtime put back, so that
// nothing the probe looks at has changed; the probe must still fail (the old code read it again
// and passed). Once the mtime moves, it is read and passes.
TEST_F(UpstreamProbe, UnusableCaFileIsNotReadAgainUntilItChanges) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.ca_file = path("ca-bad-first.crt").string();
  const std::string good = read_file(pki().ca);
  std::ofstream(s.ca_file) << std::string(good.size(), '#');
  struct stat before {};
  ASSERT_EQ(::stat(s.ca_file.c_str(), &before), 0);
  const auto seen = run_probes(s, 3, [&](unsigned i) {
    if (i == 0) {
      std::ofstream(s.ca_file) << good;  // same inode, same size
      const timespec times[2] = {before.st_atim, before.st_mtim};
      ASSERT_EQ(::utimensat(AT_FDCWD, s.ca_file.c_str(), times, 0), 0);
    }
    if (i == 1) {
      ASSERT_EQ(::utimensat(AT_FDCWD, s.ca_file.c_str(), nullptr, 0), 0);
    }
  });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].outcome.failure, probe_failure::config) << seen[0].outcome.error;
  EXPECT_EQ(seen[1].outcome.failure, probe_failure::config)
      << "read again though nothing changed: " << seen[1].outcome.error;
  EXPECT_EQ(seen[1].outcome.error, seen[0].outcome.error);
  expect_pass(seen[2].outcome);
}

TEST_F(UpstreamProbe, NoOutcomeFromInsideStart) {
  // result.hpp: a handler is never called from inside the call that started the operation, even
  // for a failure known at once (here a missing CA file).
  boost::asio::io_context io;
  auto s = settings("https://127.0.0.1:1/readyz");
  s.ca_file = path("missing.crt").string();
  unsigned calls = 0;
  shim::upstream_probe probe(io, s, [&](const probe_outcome&) {
    ++calls;
    probe.stop();
  });
  probe.start();
  EXPECT_EQ(calls, 0u) << "the outcome was delivered from inside start()";
  io.run_for(5s);
  EXPECT_EQ(calls, 1u);
}

TEST_F(UpstreamProbe, StoppedOrDestroyedMidProbe) {
  // The shim may stop polling (a shutdown) or destroy the probe while the loop goes on, with a
  // probe in flight: the aborted completions then run later and must touch neither the
  // connection that was dropped nor the probe. Then a start() right after stop() works.
  for (const bool tls : {false, true}) {
    for (const bool destroy : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", tls ? "https" : "http", destroy ? "destroyed" : "stopped"));
      auto f = start_fake({.tls = server_cert_if(tls)});
      f.readyz("hang");
      const auto s = http_or_https(f, tls);
      boost::asio::io_context io;
      std::vector<probe_outcome> seen;
      auto probe = std::make_unique<shim::upstream_probe>(io, s, [&](const probe_outcome& o) {
        seen.push_back(o);
        io.stop();
      });
      probe->start();
      // Until the request is at the stand-in: the answer is being read.
      for (int i = 0; i < 200 && f.connections() == 0; ++i) io.run_for(10ms);
      io.run_for(50ms);
      ASSERT_EQ(f.connections(), 1u);
      probe->stop();
      if (destroy) probe.reset();
      io.run_for(100ms);
      EXPECT_TRUE(seen.empty()) << "an outcome after stop()";
      if (destroy) continue;
      f.readyz("200");
      probe->start();
      probe->stop();
      probe->start();
      io.restart();
      io.run_for(kRunDeadline);
      ASSERT_EQ(seen.size(), 1u);
      expect_pass(seen.front());
    }
  }
}

TEST_F(UpstreamProbe, IntervalIsHonoured) {
  auto f = start_fake({.tls = pki().server});
  auto s = https(f);
  s.interval = 200ms;
  const auto seen = run_probes(s, 4);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    // started is computed from the handler's time, a few microseconds after the probe's own
    // clock reading: 1 ms of slack for that, far below the interval.
    EXPECT_GE(seen[i].started - seen[i - 1].started, s.interval - 1ms) << "probe " << i;
    EXPECT_GE(seen[i].started, seen[i - 1].finished - 1ms) << "one probe at a time";
  }
}

}  // namespace

int main(int argc, char** argv) {
  sandbox::prepare_sandbox_process();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
