#!/usr/bin/env bash
# Runs PROGRAM (the integration tests) against the systemd-logind of another Debian release: the
# one in the root file system scripts/debian-rootfs RELEASE caches (trixie: 257, sid: the newest),
# through that root's own dynamic loader and libraries (its glibc is newer than the machine's), as
# SYSTEMD_LOGIND. Nothing else changes: the machine's dbus-daemon, the stand-in manager, the
# sandbox. The root is only read.
#   release_logind.sh ROOTFS_SCRIPT RELEASE PROGRAM [ARGS...]
# SHUTDOWN_SHIM_ROOTFS_<RELEASE> (e.g. SHUTDOWN_SHIM_ROOTFS_TRIXIE) names a root to use instead.
# Exit status: PROGRAM's; 77 (skipped) without a root (see scripts/debian-rootfs) or x86-64.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: release_logind.sh ROOTFS_SCRIPT RELEASE PROGRAM [ARGS...]" >&2; exit 2; }
rootfs_script=$1 release=$2
shift 2

skip() {
  echo "release_logind: SKIP: $*" >&2
  exit 77
}

override_var=SHUTDOWN_SHIM_ROOTFS_${release^^}
root=${!override_var:-}
if [ -z "$root" ]; then
  rc=0
  root=$("$rootfs_script" "$release") || rc=$?
  [ "$rc" -eq 0 ] || { [ "$rc" -eq 77 ] && skip "no $release root file system"; exit "$rc"; }
fi

loader=$root/usr/lib64/ld-linux-x86-64.so.2
logind=$root/usr/lib/systemd/systemd-logind
libs=$root/usr/lib/x86_64-linux-gnu
[ -x "$loader" ] || skip "no x86-64 loader in $root"
[ -x "$logind" ] || skip "no systemd-logind in $root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The harness execs SYSTEMD_LOGIND with no arguments; --argv0 keeps logind's name in its log.
cat >"$tmp/systemd-logind" <<EOF
#!/bin/sh
exec '$loader' --library-path '$libs:$libs/systemd' --argv0 /usr/lib/systemd/systemd-logind \\
  '$logind' "\$@"
EOF
chmod 0755 "$tmp/systemd-logind"
# Which logind ran, in the test's log; it also fails early if the root's libraries do not load.
echo "release_logind: $release: $("$tmp/systemd-logind" --version | head -n 1) from $root"

rc=0
SYSTEMD_LOGIND=$tmp/systemd-logind "$@" || rc=$?
exit "$rc"
