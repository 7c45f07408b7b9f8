// What this binary is: the release (meson's project version) and the git revision it was built
// from, so that an operator can tell two builds of one version apart (--version, the Started
// event, shutdown_shim_build_info).
#pragma once

#include <string_view>

namespace shim {

extern const std::string_view kVersion;
// `git describe --always --dirty` of the tree at build time, or $SHUTDOWN_SHIM_REVISION (a build
// from an exported tree, such as the Debian package's), or "unknown".
extern const std::string_view kRevision;

}  // namespace shim
