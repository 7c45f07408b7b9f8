#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "upstream/upstream_check.hpp"
#include "upstream/upstream_settings.hpp"
#include "util/result.hpp"

namespace shim {

// Polls kube-apiserver's own /readyz in the background, on the loop: one probe at a time, the next
// starting no earlier than `interval` after the previous one started; `timeout` covers connect,
// TLS and the whole answer. Pass means status 200. A keep-alive connection is used across probes
// when the server allows it, and dropped on any error.
//
// TLS through OpenSSL: the chain is verified against --upstream-ca-file (or the system's trust
// store), and the host name or IP (or --upstream-tls-server-name) against the certificate; SNI is
// sent for names. The CA, the client certificate and key, and the token are read (small_file.hpp:
// regular files only, bounded) and handed to OpenSSL from memory, never by path, so that no file
// can block the loop. They are read again whenever their files change (tokens and certificates
// rotate); a file that fails to load is not read again until it changes, its error standing for
// every probe meanwhile (parsed at every probe, a huge one slowed /readyz:
// UpstreamProbe.UnusableCaFileIsNotReadAgainUntilItChanges).
// A missing file fails each probe: on a node being installed it may appear later.
//
// The answer is read in two steps, the header first: a Content-Length or header block beyond the
// bounds fails the probe (oversize) before any body is read or allocated. Read in one step, Boost
// 1.74's parser reserves the announced length (docs/design.md, "The upstream check").
//
// A new TLS connection resumes the session of the last one when the server gave a ticket (OpenSSL's
// client cache, kept here, one session deep), so that a reconnection costs the server less than a
// full handshake. A resumption never stands in for a verification the shim would now make
// differently or that may have changed: the session is dropped when the trust or the credentials
// are loaded again, after any failed probe, and when the server's certificate it was made with has
// expired. The URL and the name verified are fixed for a probe's life, so a session is never
// offered to another server.
class upstream_probe : public upstream_check::probe {
 public:
  // probed: each outcome, never from inside start().
  upstream_probe(boost::asio::io_context& io, const upstream_settings& settings,
                 std::function<void(const probe_outcome&)> probed);
  ~upstream_probe() override;
  upstream_probe(const upstream_probe&) = delete;
  upstream_probe& operator=(const upstream_probe&) = delete;

  void start() override;
  void stop() override;

 private:
  using clock = std::chrono::steady_clock;
  using tcp = boost::asio::ip::tcp;
  using plain_stream = boost::beast::tcp_stream;
  using tls_stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

  // A file the probe depends on, and the version of it that was last read: a rewrite (a rotated
  // token, a renewed certificate) changes at least one of these.
  struct watched_file {
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    std::int64_t mtime_ns = -1;

    // Whether the file changed since the last call (a first call counts as a change); an error
    // when it cannot be stat()ed (it is then a change again once it can).
    result<bool> changed();
  };

  // One connection: its stream and what its operations read and write. Every operation started
  // on it holds it, so it can be dropped (stop(), an error, new credentials) or the probe
  // destroyed while one is in flight: the aborted operation still finds its stream, engine and
  // buffers (UpstreamProbe.StoppedOrDestroyedMidProbe, under ASan).
  struct connection {
    std::optional<plain_stream> plain;
    std::optional<tls_stream> tls;
    bool open = false;  // connected (and TLS done): kept alive for the next probe
    boost::beast::flat_buffer buffer;
    boost::beast::http::request<boost::beast::http::empty_body> request;
    std::optional<boost::beast::http::response_parser<boost::beast::http::string_body>> parser;

    boost::beast::tcp_stream& lowest();
  };

  // A completion handler that runs only while this probe exists and is still at this
  // generation; it keeps the connection alive until it has run.
  template <typename Handler>
  auto guarded(unsigned generation, Handler handler);

  void probe();
  std::optional<std::string> refresh_files();
  std::optional<std::string> load_tls_context();
  std::optional<std::string> load_token();
  void connect();
  void on_connected(unsigned generation, boost::beast::error_code ec);
  void send(unsigned generation);
  void read_answer(unsigned generation);
  void on_answer(unsigned generation, boost::beast::error_code ec);
  void fail(unsigned generation, probe_outcome outcome);
  void finish(probe_outcome outcome);
  void close_connection();
  probe_outcome describe(boost::beast::error_code ec, bool handshake) const;
  // OpenSSL's new-session callback: a ticket (TLS 1.3, after the handshake) or a session (1.2).
  static int on_new_session(SSL* ssl, SSL_SESSION* session);
  void offer_session(SSL* handle);

  struct session_free {
    void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
  };

  boost::asio::io_context& io_;
  upstream_settings settings_;
  std::function<void(const probe_outcome&)> probed_;
  std::vector<tcp::endpoint> endpoints_;
  std::string host_header_;

  std::unique_ptr<boost::asio::ssl::context> tls_context_;
  std::unique_ptr<SSL_SESSION, session_free> session_;  // to resume; from tls_context_'s trust
  std::shared_ptr<connection> connection_;
  bool reused_ = false;  // this probe runs on a connection an earlier probe opened
  bool retried_ = false;

  watched_file ca_, cert_, key_, token_file_;
  // Loaded from the files as they are now: the error, or nullopt for a success.
  std::optional<std::optional<std::string>> tls_loaded_, token_loaded_;
  std::string token_;

  boost::asio::steady_timer next_;
  clock::time_point started_;
  unsigned generation_ = 0;  // completions of an earlier probe are stale
  bool running_ = false;
  // Handlers hold it weakly: expired, the probe is gone.
  std::shared_ptr<const bool> lifetime_ = std::make_shared<const bool>(true);
};

}  // namespace shim
