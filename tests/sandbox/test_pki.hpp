#pragma once

#include <filesystem>

namespace sandbox {

struct cert_and_key {
  std::filesystem::path cert;
  std::filesystem::path key;
};

// Certificates for TLS tests, made at test time with the openssl CLI (EC P-256 keys: the whole set
// takes a fraction of a second). Server certificates carry kubeadm's kind of names.
struct test_pki {
  std::filesystem::path ca;  // signs server, expired and wrong_name
  // DNS:localhost, DNS:kubernetes, IP:127.0.0.1; serverAuth, valid for a day.
  cert_and_key server;
  // The same names and key, but notAfter already passed.
  cert_and_key expired;
  // Signed by ca, for DNS:elsewhere.example and IP:192.0.2.1 only.
  cert_and_key wrong_name;
  std::filesystem::path other_ca;  // unrelated to every certificate here
  std::filesystem::path client_ca;
  cert_and_key client;        // clientAuth, CN=shutdown-shim, signed by client_ca
  cert_and_key stray_client;  // clientAuth, signed by other_ca

  // Makes all of them in dir (which must exist). Throws std::runtime_error naming the step and
  // with openssl's output when a step fails.
  static test_pki make(const std::filesystem::path& dir);
};

}  // namespace sandbox
