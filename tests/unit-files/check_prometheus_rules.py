#!/usr/bin/python3
"""Evaluates the shipped PrometheusRule with Prometheus' own engine: its spec is written out as a
rule file next to a copy of the rule test, then `promtool test rules` runs on it.

usage: check_prometheus_rules.py PROMETHEUSRULE TEST_FILE
PROMTOOL names promtool (Debian's prometheus package, scripts/deps.sh provide_promtool); without it
the test is skipped (exit 77), except under CI=true, where a skip is a failure.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import yaml

from check_deployment import missing_tool


def main():
    rule_path, test_path = sys.argv[1], sys.argv[2]
    promtool = os.environ.get("PROMTOOL", "")
    if not promtool:
        return missing_tool("no promtool: install Debian's prometheus package or set PROMTOOL")
    with open(rule_path) as f:
        rule = yaml.safe_load(f)
    if rule.get("apiVersion") != "monitoring.coreos.com/v1" or rule.get("kind") != "PrometheusRule":
        print(f"{rule_path}: not a monitoring.coreos.com/v1 PrometheusRule", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="shim-rules-") as tmp:
        with open(os.path.join(tmp, "shutdown-shim.rules.yaml"), "w") as f:
            yaml.safe_dump(rule["spec"], f, sort_keys=False)
        test_copy = os.path.join(tmp, os.path.basename(test_path))
        shutil.copyfile(test_path, test_copy)
        for args in (["check", "rules", "shutdown-shim.rules.yaml"], ["test", "rules", test_copy]):
            done = subprocess.run([promtool, *args], cwd=tmp, capture_output=True, text=True)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            if done.returncode != 0:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
