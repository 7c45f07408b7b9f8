#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "util/result.hpp"

namespace shim {

// kube-apiserver's own shutdown settings (k8s.io/apiserver's ServerRunOptions), which decide when
// it stops accepting after its SIGTERM (issue 32; ../shared/reference/real-node.md):
//   --shutdown-delay-duration  it keeps serving this long (default 0: it stops at once)
//   --shutdown-send-retry-after  then 429 + Retry-After until its requests drain (default false)
struct apiserver_shutdown {
  std::chrono::nanoseconds delay{0};
  bool send_retry_after = false;
  friend bool operator==(const apiserver_shutdown&, const apiserver_shutdown&) = default;
};

// The settings a command line runs kube-apiserver with, read as spf13/pflag reads them:
// "--name=value", "--name value" (not for a bool), a bare bool flag is true, the last one given
// wins, nothing after "--". Flags it does not name take the library's defaults. OpenShift's
// container runs "watch-termination ... -- hyperkube kube-apiserver ...": the words after
// watch-termination's "--" and before the first flag are skipped. A failure names what cannot be
// known: a value kube-apiserver would refuse (it would not run), or settings kept in the file of
// --openshift-config, which the shim does not read.
result<apiserver_shutdown> read_apiserver_flags(std::span<const std::string> argv);

}  // namespace shim
