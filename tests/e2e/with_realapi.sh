#!/bin/sh
# Runs an e2e program against the real apiserver: `with_realapi.sh SCRIPT PROGRAM [ARG...]` runs
# SCRIPT (scripts/realapi: the cached binaries at once, else their build) and then PROGRAM ARG...
# --server=real --realapi-dir=DIR, DIR the last line SCRIPT printed. When SCRIPT cannot build here
# (77) the test is skipped, which under CI=true is a failure, as realapi-smoke.
script=$1
shift
dir=$("$script")
status=$?
if [ "$status" -eq 77 ]; then
  if [ "${CI:-}" = true ]; then
    echo "FAIL: scripts/realapi cannot build here (CI=true: a skip is a failure)" >&2
    exit 1
  fi
  echo "SKIP: scripts/realapi cannot build here" >&2
  exit 77
fi
if [ "$status" -ne 0 ]; then
  echo "FAIL: $script exited $status" >&2
  exit 1
fi
exec "$@" --server=real --realapi-dir="$(printf '%s\n' "$dir" | tail -n 1)"
