#!/usr/bin/env bash
# Builds the cached base root filesystem for the VM test: a minimal Debian 12 with systemd, dbus,
# the distribution kernel and the shared libraries the host-built shim and stand-in apiserver link
# against. scripts/vm-test keys its cache by a hash of this file, so every input of the image
# (suite, mirror, package list, the tweaks below) must live here.
#   build-base-rootfs.sh DIR
set -euo pipefail

dir=$1
suite=bookworm
mirror=http://deb.debian.org/debian
packages=(
  systemd systemd-sysv dbus udev kmod linux-image-amd64
  # Run-time libraries of build-vm/src/shutdown-shim and tests/sandbox/fake_apiserver (ldd).
  libsystemd0 libfmt9 libstdc++6 libyaml-0-2
)

debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" "$suite" "$dir" "$mirror"

echo '/dev/vda / ext4 defaults 0 0' >"$dir/etc/fstab"
echo shim-vm >"$dir/etc/hostname"
# A persistent journal, so that the host can read it from the image after the guest went down.
mkdir -p "$dir/var/log/journal"
# No package caches in the image.
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
