# Sourced by scripts/test and scripts/demo: installs the Debian 12 packages the build and the tests
# need, and only those that are missing, because CI and new machines start bare.
shim_packages=(
  g++ meson ninja-build pkg-config
  libsystemd-dev libboost-dev libfmt-dev libssl-dev libgtest-dev libgmock-dev
  dbus systemd util-linux curl python3 openssl
  haproxy gnuplot-nox python3-yaml
)

# The libFuzzer targets (scripts/fuzz, and the fuzz stage of scripts/test).
fuzz_packages=(clang-14 libfuzzer-14-dev libclang-rt-14-dev)

install_missing_packages() {
  local missing=()
  local p
  for p in "${shim_packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "need root to install ${missing[*]} (or install them yourself)" >&2
    return 1
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
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
