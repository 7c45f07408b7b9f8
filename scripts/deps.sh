# Sourced by the scripts (test, demo, package, fuzz, bench): the Debian 12 packages each job needs,
# kept apart, and install_missing_packages, which installs those missing (CI and new machines
# start bare). What a node needs at run time is none of these: the .deb's Depends, which
# dpkg-shlibdeps works out from the libraries the binary links (docs/install.md).

# Compiling the shim and its man page: what debian/control's Build-Depends says.
build_packages=(
  g++ meson ninja-build pkg-config git help2man
  libsystemd-dev libboost-dev libfmt-dev libssl-dev libyaml-dev
)

# The test suites and the demo on top of that: GoogleTest, a private dbus-daemon and the real
# logind (systemd), man-db (systemd-analyze verify reads Documentation=), bash-completion's helpers
# (test_command_line; on a node bash-completion loads the shim's completion, which needs nothing
# else), HAProxy for e2e, the plots of scripts/bench.
test_packages=(
  libgtest-dev libgmock-dev
  dbus systemd util-linux curl python3 openssl man-db bash-completion
  haproxy gnuplot-nox python3-yaml
  $(command -v kubectl >/dev/null || echo kubernetes-client)  # manifest tests: kubectl kustomize (any kubectl; Google's conflicts with it)
)

# scripts/package: the .deb (debhelper, lintian) and the image (buildah, podman save).
package_packages=(debhelper dpkg-dev lintian buildah podman)

# The libFuzzer targets (scripts/fuzz, and the fuzz stage of scripts/test).
fuzz_packages=(clang-14 libfuzzer-14-dev libclang-rt-14-dev)

# Real systemd and a real container runtime (scripts/test: the suites system and containers):
# systemd-nspawn boots a debootstrapped Debian 12; podman 4.3 runs the manifests with runc
# (crun refuses hybrid cgroups) and catatonit as the pods' infra process; buildah builds the
# images from scratch.
system_packages=(systemd-container debootstrap podman buildah runc catatonit)

# install_missing_packages PACKAGE...: installs those of PACKAGE... that are not installed.
install_missing_packages() {
  local missing=()
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "need root to install ${missing[*]} (or install them yourself)" >&2
    return 1
  fi
  # Other sessions on a shared machine may hold dpkg's lock for a while: wait for it.
  apt-get -o DPkg::Lock::Timeout=600 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "${missing[@]}"
}

# Whether build folder $1 is set up as the package's (debian/rules test-build): its record of the
# flags and options is what debian/rules gives now. Run in the tree.
is_package_build() {
  [ -f "$1/package-configuration" ] &&
    make -s -f debian/rules configuration | cmp -s - "$1/package-configuration"
}

# Sets up (or reconfigures) a clang build of the fuzz targets only, with ASan and UBSan, in $1.
setup_fuzz_build() {
  local dir=$1
  local args=(-Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false --werror)
  if [ -d "$dir" ]; then
    meson setup --reconfigure "$dir" "${args[@]}" >/dev/null
  else
    CC=clang-14 CXX=clang++-14 meson setup "$dir" "${args[@]}" >/dev/null
  fi
  meson compile -C "$dir"
}

# Puts Prometheus' promtool on PATH (the unit tests check /metrics with `promtool check metrics`).
# Only the binary is needed, so it is taken out of Debian's prometheus package into a cache rather
# than installing the package, whose postinst would start a Prometheus server on the machine.
promtool_cache=/var/cache/shutdown-shim/prometheus
provide_promtool() {
  if command -v promtool >/dev/null; then return 0; fi
  if [ ! -x "$promtool_cache/usr/bin/promtool" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "need root to fetch promtool (or put it on PATH yourself)" >&2
      return 1
    fi
    local tmp
    tmp=$(mktemp -d)
    chmod 755 "$tmp"  # apt-get download runs as _apt
    (cd "$tmp" && apt-get -o DPkg::Lock::Timeout=600 download -q prometheus >/dev/null) ||
      { apt-get -o DPkg::Lock::Timeout=600 update -q &&
        (cd "$tmp" && apt-get download -q prometheus >/dev/null); } ||
      { rm -rf "$tmp"; return 1; }
    mkdir -p "$promtool_cache"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$promtool_cache"
    rm -rf "$tmp"
  fi
  export PATH="$PATH:$promtool_cache/usr/bin"
}
