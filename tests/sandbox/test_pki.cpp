#include "test_pki.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "process.hpp"

namespace sandbox {

namespace {

namespace fs = std::filesystem;

constexpr std::chrono::milliseconds kStepTimeout{30'000};
constexpr std::string_view kServerNames = "DNS:localhost,DNS:kubernetes,IP:127.0.0.1";

// scripts/deps.sh installs the openssl package; execve needs the absolute path.
std::string openssl_path() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/openssl";
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw std::runtime_error("no openssl in PATH (scripts/deps.sh installs the openssl package)");
}

class openssl_runner {
 public:
  explicit openssl_runner(const fs::path& dir) : dir_(dir), tool_(openssl_path()) {}

  void run(const std::vector<std::string>& args) {
    std::vector<std::string> argv{tool_};
    argv.insert(argv.end(), args.begin(), args.end());
    const fs::path log = dir_ / "openssl.log";
    fs::remove(log);
    spawn_options options;
    options.stdout_path = log;
    child_process child("openssl", argv, options);
    const auto status = child.wait_for_exit(kStepTimeout);
    if (!status || shell_exit_code(*status) != 0) {
      std::ifstream in(log);
      const std::string output((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
      throw std::runtime_error(fmt::format("openssl {} failed ({}): {}", fmt::join(args, " "),
                                           status ? describe_wait_status(*status) : "timeout",
                                           output));
    }
  }

  // A self-signed CA (openssl 3 adds basicConstraints CA:TRUE and the key identifiers).
  fs::path ca(const std::string& name) {
    const fs::path cert = dir_ / (name + ".crt");
    run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", (dir_ / (name + ".key")).string(), "-out", cert.string(), "-subj",
         "/CN=" + name, "-days", "2"});
    return cert;
  }

  // A key and its certificate request.
  cert_and_key key(const std::string& name) {
    const cert_and_key k{.cert = dir_ / (name + ".csr"), .key = dir_ / (name + ".key")};
    run({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
         k.key.string(), "-out", k.cert.string(), "-subj", "/CN=" + name});
    return k;
  }

  // Signs a request with the CA at ca (its key beside it, .key for .crt). days -1 gives a
  // certificate whose notAfter has passed (openssl 3.0 has no -not_after).
  cert_and_key sign(const cert_and_key& request, const fs::path& ca, const std::string& name,
                    const std::string& extensions, int days = 1) {
    const fs::path ext = dir_ / (name + ".ext");
    std::ofstream(ext) << extensions << "\n";
    const cert_and_key signed_cert{.cert = dir_ / (name + ".crt"), .key = request.key};
    fs::path ca_key = ca;
    ca_key.replace_extension(".key");
    run({"x509", "-req", "-in", request.cert.string(), "-CA", ca.string(), "-CAkey",
         ca_key.string(), "-set_serial", std::to_string(++serial_), "-days", std::to_string(days),
         "-extfile", ext.string(), "-out", signed_cert.cert.string()});
    return signed_cert;
  }

 private:
  fs::path dir_;
  std::string tool_;
  unsigned serial_ = 1000;
};

std::string server_extensions(std::string_view names) {
  return fmt::format(
      "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
      "extendedKeyUsage=serverAuth\nsubjectAltName={}",
      names);
}

constexpr std::string_view kClientExtensions =
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=clientAuth";

}  // namespace

test_pki test_pki::make(const fs::path& dir) {
  openssl_runner openssl(dir);
  test_pki pki;
  pki.ca = openssl.ca("ca");
  pki.other_ca = openssl.ca("other-ca");
  pki.client_ca = openssl.ca("client-ca");
  const auto server_key = openssl.key("kube-apiserver");
  pki.server = openssl.sign(server_key, pki.ca, "server", server_extensions(kServerNames));
  pki.expired =
      openssl.sign(server_key, pki.ca, "expired", server_extensions(kServerNames), /*days=*/-1);
  pki.wrong_name = openssl.sign(server_key, pki.ca, "wrong-name",
                                server_extensions("DNS:elsewhere.example,IP:192.0.2.1"));
  const auto client_key = openssl.key("shutdown-shim");
  pki.client = openssl.sign(client_key, pki.client_ca, "client", std::string(kClientExtensions));
  pki.stray_client =
      openssl.sign(client_key, pki.other_ca, "stray-client", std::string(kClientExtensions));
  return pki;
}

}  // namespace sandbox
