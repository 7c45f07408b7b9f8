// parse_upstream_url: what --upstream-readyz accepts, what it refuses and why (a table each).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "upstream/upstream_settings.hpp"

namespace shim {
namespace {

using namespace std::string_view_literals;

struct good_case {
  std::string_view text;
  bool tls;
  std::string_view host;
  std::uint16_t port;
  std::string_view target;
  std::string_view canonical;  // text() of the result
};

constexpr good_case kGood[] = {
    {"https://localhost:6443/readyz", true, "localhost", 6443, "/readyz",
     "https://localhost:6443/readyz"},
    {"http://127.0.0.1:6080/readyz", false, "127.0.0.1", 6080, "/readyz",
     "http://127.0.0.1:6080/readyz"},
    {"https://[::1]:6443/readyz", true, "::1", 6443, "/readyz", "https://[::1]:6443/readyz"},
    {"https://[::ffff:127.0.0.1]:6443/readyz", true, "::ffff:127.0.0.1", 6443, "/readyz",
     "https://[::ffff:127.0.0.1]:6443/readyz"},
    {"https://10.0.0.7:6443/readyz", true, "10.0.0.7", 6443, "/readyz",
     "https://10.0.0.7:6443/readyz"},
    // Default ports, also for an empty one (RFC 3986).
    {"https://localhost/readyz", true, "localhost", 443, "/readyz", "https://localhost:443/readyz"},
    {"http://localhost/readyz", false, "localhost", 80, "/readyz", "http://localhost:80/readyz"},
    {"https://[::1]/readyz", true, "::1", 443, "/readyz", "https://[::1]:443/readyz"},
    {"https://localhost:/readyz", true, "localhost", 443, "/readyz",
     "https://localhost:443/readyz"},
    {"https://[::1]:/readyz", true, "::1", 443, "/readyz", "https://[::1]:443/readyz"},
    {"https://localhost:65535/readyz", true, "localhost", 65535, "/readyz",
     "https://localhost:65535/readyz"},
    {"https://localhost:1/readyz", true, "localhost", 1, "/readyz", "https://localhost:1/readyz"},
    // Path and query are sent as given.
    {"https://localhost:6443/readyz?verbose&exclude=etcd", true, "localhost", 6443,
     "/readyz?verbose&exclude=etcd", "https://localhost:6443/readyz?verbose&exclude=etcd"},
    {"https://localhost:6443/", true, "localhost", 6443, "/", "https://localhost:6443/"},
    {"https://localhost:6443/%72eadyz", true, "localhost", 6443, "/%72eadyz",
     "https://localhost:6443/%72eadyz"},
    // No path: /readyz (see upstream_settings.hpp), with a query too.
    {"https://localhost:6443", true, "localhost", 6443, "/readyz", "https://localhost:6443/readyz"},
    {"https://localhost", true, "localhost", 443, "/readyz", "https://localhost:443/readyz"},
    {"https://localhost:6443?verbose", true, "localhost", 6443, "/readyz?verbose",
     "https://localhost:6443/readyz?verbose"},
    // Scheme and localhost are case-insensitive.
    {"HTTPS://LocalHost:6443/readyz", true, "localhost", 6443, "/readyz",
     "https://localhost:6443/readyz"},
    {"Http://127.0.0.1/readyz", false, "127.0.0.1", 80, "/readyz", "http://127.0.0.1:80/readyz"},
};

TEST(ParseUpstreamUrl, Good) {
  for (const auto& c : kGood) {
    SCOPED_TRACE(c.text);
    const auto url = parse_upstream_url(c.text);
    ASSERT_TRUE(url) << url.error();
    EXPECT_EQ(url.value().tls, c.tls);
    EXPECT_EQ(url.value().host, c.host);
    EXPECT_EQ(url.value().port, c.port);
    EXPECT_EQ(url.value().target, c.target);
    EXPECT_EQ(url.value().text(), c.canonical);
    const auto again = parse_upstream_url(url.value().text());
    ASSERT_TRUE(again) << again.error();
    EXPECT_EQ(again.value().text(), c.canonical) << "text() parses back to itself";
  }
}

struct bad_case {
  std::string_view text;
  std::string_view error;
};

const bad_case kBad[] = {
    {"", "want an http:// or https:// URL, e.g. https://localhost:6443/readyz"},
    {"localhost:6443/readyz",
     "want an http:// or https:// URL, e.g. https://localhost:6443/readyz"},
    {"ftp://localhost/readyz",
     "want an http:// or https:// URL, e.g. https://localhost:6443/readyz"},
    {"unix:///run/kube.sock",
     "want an http:// or https:// URL, e.g. https://localhost:6443/readyz"},
    {"https:/localhost/readyz",
     "want an http:// or https:// URL, e.g. https://localhost:6443/readyz"},
    // Names other than localhost would need a resolver.
    {"https://kubernetes:6443/readyz",
     "\"kubernetes\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https://localhost.:6443/readyz",
     "\"localhost.\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https://localhostx/readyz",
     "\"localhostx\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https://127.1:6443/readyz",
     "\"127.1\" is neither an IP address nor localhost (the upstream is this node's apiserver)"},
    {"https://[127.0.0.1]:6443/readyz",
     "\"127.0.0.1\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https://[localhost]:6443/readyz",
     "\"localhost\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https://::1:6443/readyz",
     "\"::1\" is neither an IP address nor localhost (the upstream is this node's apiserver)"},
    {"https://[fe80::1%25lo]:6443/readyz",
     "\"fe80::1%25lo\" is neither an IP address nor localhost (the upstream is this node's "
     "apiserver)"},
    {"https:///readyz", "no host"},
    {"https://:6443/readyz", "no host"},
    {"https://[]:6443/readyz", "no host"},
    {"https://[::1/readyz", "unclosed [ in the host"},
    {"https://[::1]6443/readyz", "junk after ]"},
    // Ports.
    {"https://localhost:0/readyz", "port \"0\" is not in 1..65535"},
    {"https://localhost:65536/readyz", "port \"65536\" is not in 1..65535"},
    {"https://localhost:70000/readyz", "port \"70000\" is not in 1..65535"},
    {"https://localhost:99999999999999999999/readyz",
     "port \"99999999999999999999\" is not in 1..65535"},
    {"https://localhost:-1/readyz", "port \"-1\" is not in 1..65535"},
    {"https://localhost:+443/readyz", "port \"+443\" is not in 1..65535"},
    {"https://localhost:6443x/readyz", "port \"6443x\" is not in 1..65535"},
    {"https://localhost:https/readyz", "port \"https\" is not in 1..65535"},
    // User info, fragments.
    {"https://admin:secret@localhost:6443/readyz",
     "no user info in the URL; use --upstream-token-file"},
    {"https://@localhost/readyz", "no user info in the URL; use --upstream-token-file"},
    {"https://localhost:6443/readyz#top", "a fragment is not sent"},
    {"https://localhost:6443#top", "a fragment is not sent"},
    // Bytes that do not belong in a request line or a Host header.
    {"https://localhost:6443/ready z",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {" https://localhost:6443/readyz",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://localhost:6443/readyz\n",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://localhost:6443/readyz\r\nX-Injected: 1",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://localhost:6443/readyz\x7f",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://localhost:6443/r\xc3\xa9"
     "adyz",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://127.0.0.1\0junk:6443/readyz"sv,
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
    {"https://local\thost/readyz",
     "a space, control or non-ASCII byte in the URL (percent-encode it)"},
};

TEST(ParseUpstreamUrl, Bad) {
  for (const auto& c : kBad) {
    SCOPED_TRACE(testing::PrintToString(std::string(c.text)));
    const auto url = parse_upstream_url(c.text);
    if (url) {
      ADD_FAILURE() << "accepted as " << url.value().text();
    } else {
      EXPECT_EQ(url.error(), c.error);
    }
  }
}

TEST(UpstreamSettings, EnabledByAUrl) {
  upstream_settings s;
  EXPECT_FALSE(s.enabled());
  s.url = parse_upstream_url("https://localhost:6443/readyz").value();
  EXPECT_TRUE(s.enabled());
}

}  // namespace
}  // namespace shim
