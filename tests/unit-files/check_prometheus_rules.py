#!/usr/bin/python3
"""Checks what ships for Prometheus (unit-files/prometheus/) with Prometheus' own tools and the
built shim:

- the PrometheusRule: its spec written out as a rule file, `promtool check rules` and `promtool
  test rules` on it (the test file's cases); every alert has a `for:` (but the one bounded by
  time) and a one-line description that links its runbook section; every runbook_url resolves:
  one base for all (the one place an operator sets, which docs/install.md names), then a file of
  the tree that the package installs as a doc (debian/shutdown-shim.docs), then a heading of it;
- the Grafana dashboard: every query of its panels as a recording rule, `promtool check rules` on
  them, and each evaluated by `promtool test rules` over the series of a real /metrics scrape: a
  query that returns nothing there (a metric's name mistyped) fails;
- the metric names that the alerts, their test's series and the dashboard use are all ones the
  shim exports: those of a /metrics scrape of the built shim, and those that src/http/
  prometheus_metrics.cpp names (the gauges absent until known: logind's delay, the previous
  shutdown), whose list must cover every family of the scrape;
- the PodMonitor: it selects the DaemonSet's pods, scrapes a named port of the shim's container
  that --listen opens, and names the job that the alerts select.

usage: check_prometheus_rules.py --rule R --rule-test T --dashboard D --podmonitor P
         --daemonset DS --source-root DIR --package-docs DOCS --metrics-source CPP --shim SHIM
PROMTOOL names promtool (Debian's prometheus package, scripts/deps.sh provide_promtool); without it
the test is skipped (exit 77), except under CI=true, where a skip is a failure.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request

import yaml

from check_deployment import Problems, argv_of, is_shim, missing_tool, shim_flag_values

# PromQL words that are not metric names.
PROMQL_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "offset", "bool", "inf", "nan"}
# Series that Prometheus writes itself for every target.
SCRAPE_SERIES = {"up"}
# What the dashboard's variables stand for when its queries are checked.
GRAFANA_VARIABLES = {"instance": ".+", "__rate_interval": "1m", "__interval": "15s",
                     "__range": "1h", "datasource": "prometheus"}
# The dashboard's queries are evaluated over a scrape of the shim as two nodes, one of them in
# a shutdown's hold with a previous shutdown on record: every panel has something to show.
HOLDING_NODE = {
    "shutdown_shim_draining": "1",
    "shutdown_shim_inhibitor_held": "1",
    "shutdown_shim_shutdown_start_time_seconds": "240",
    "shutdown_shim_logind_inhibit_delay_max_seconds": "149",
    "shutdown_shim_logind_inhibit_delay_too_short": "0",
    "shutdown_shim_previous_shutdown_clean": "1",
    "shutdown_shim_previous_shutdown_hold_seconds": "75.5",
    "shutdown_shim_previous_shutdown_unready_to_signal_seconds": "1.5",
}
EVAL_STEPS = 40  # 15 s apart: 10 minutes of series


def promql_metric_names(expr):
    """The metric names a PromQL expression selects (not its functions, keywords or labels)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", text):
        if m.group(1).lower() not in PROMQL_KEYWORDS:
            names.add(m.group(1))
    return names


def series_name(series):
    return series.partition("{")[0].strip()


def github_anchor(heading):
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def run(promtool, args, cwd):
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode == 0


def scrape_shim(shim):
    """/metrics of the built shim, started without D-Bus (--inhibit=off, a bus address that goes
    nowhere: never the machine's bus) and without a target; ready when it says READY=1."""
    with tempfile.TemporaryDirectory(prefix="shim-scrape-") as tmp:
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(os.path.join(tmp, "notify"))
        notify.settimeout(30)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        env = {"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": os.path.join(tmp, "notify"),
               "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=" + os.path.join(tmp, "no-bus")}
        # The upstream check against a port nothing listens on: its families are there.
        shim_process = subprocess.Popen(
            [shim, "--inhibit=off", "--forward-on-sigterm=never", f"--listen=127.0.0.1:{port}",
             f"--state-dir={tmp}", "--upstream-readyz=http://127.0.0.1:9/readyz"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while b"READY=1" not in notify.recv(4096):
                pass
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return r.read().decode()
        finally:
            shim_process.terminate()
            shim_process.wait(timeout=30)
            notify.close()


def parse_scrape(text):
    """(families by TYPE line, samples as (name, labels, value))."""
    families, samples = set(), []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
        elif line and not line.startswith("#"):
            m = re.fullmatch(r"([\w:]+)(\{.*\})?\s+(\S+)", line)
            samples.append((m.group(1), (m.group(2) or "{}")[1:-1], m.group(3)))
    return families, samples


def source_metric_names(path):
    """Every family the renderer names in a string literal ("name", "# HELP name ...")."""
    with open(path) as f:
        source = f.read()
    return set(re.findall(r'"(?:# HELP |# TYPE )?((?:shutdown_shim|process)_[a-z0-9_]+)', source))


def dashboard_queries(dashboard):
    """(where, PromQL) for every panel target, and the metric of each label_values() variable."""
    queries, variable_metrics = [], set()
    for panel in dashboard.get("panels", []):
        for t in panel.get("targets", []):
            queries.append((f"panel {panel['id']} {panel['title']!r} {t['refId']}", t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        query = v.get("query")
        if v.get("type") == "query":
            text = query.get("query") if isinstance(query, dict) else query
            m = re.fullmatch(r"label_values\(\s*([\w:]+)\s*,\s*\w+\s*\)", text or "")
            if m:
                variable_metrics.add(m.group(1))
            else:
                queries.append((f"variable {v['name']}", text))
    return queries, variable_metrics


def substitute(expr):
    return re.sub(r"\$\{?(\w+)\}?", lambda m: GRAFANA_VARIABLES[m.group(1)], expr)


def shipped_docs(source_root, package_docs):
    """The docs the package installs (dh_installdocs' list), each with its headings' anchors."""
    with open(package_docs) as f:
        paths = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    docs = {}
    for path in paths:
        with open(os.path.join(source_root, path)) as f:
            docs[path] = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", f.read(), re.M)}
    return docs


def check_rule(p, rule, docs, install_md):
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    bases = set()
    for a in alerts:
        where = a["alert"]
        bounded = "process_start_time_seconds" in a["expr"]
        p.check(bounded or "for" in a, f"{where}: no `for:` (a transient fault would fire it)")
        url = a.get("annotations", {}).get("runbook_url", "")
        description = a.get("annotations", {}).get("description", "")
        location, _, anchor = url.partition("#")
        doc = next((d for d in docs if location.endswith("/" + d)), None)
        p.check(doc is not None,
                f"{where}: runbook_url {url!r} names no doc the package installs ({sorted(docs)})")
        if doc is not None:
            bases.add(location[:-len(doc)])
            p.check(anchor in docs[doc], f"{where}: runbook_url {url!r} is no section of {doc}")
        p.check(url and url in description and "\n" not in description,
                f"{where}: the description is not one line that links the runbook")
    p.check(len(bases) == 1, f"the runbook links have more than one base: {sorted(bases)}")
    for base in bases:
        p.check(base in install_md,
                f"docs/install.md does not say where the runbook links' base {base!r} is set")
    return alerts


def check_podmonitor(p, podmonitor, daemonset, up_jobs):
    template = daemonset["spec"]["template"]
    pod_labels = template["metadata"]["labels"]
    shim = next(c for c in template["spec"]["containers"] if is_shim(c))
    flags = shim_flag_values(argv_of(shim)[1:])
    listen_ports = {int(a.rpartition(":")[2]) for a in flags.get("--listen", [])}
    named = {port.get("name"): port.get("containerPort") for port in shim.get("ports", [])}
    spec = podmonitor["spec"]
    p.check(podmonitor.get("kind") == "PodMonitor" and
            podmonitor.get("apiVersion") == "monitoring.coreos.com/v1",
            "the PodMonitor is not a monitoring.coreos.com/v1 PodMonitor")
    namespace = daemonset["metadata"]["namespace"]
    p.check(namespace in spec.get("namespaceSelector", {}).get("matchNames", []),
            f"the PodMonitor does not look in the DaemonSet's namespace {namespace}")
    selector = spec.get("selector", {}).get("matchLabels", {})
    p.check(selector and selector.items() <= pod_labels.items(),
            f"the PodMonitor selects {selector}, the DaemonSet's pods are {pod_labels}")
    for endpoint in spec.get("podMetricsEndpoints", []):
        port = endpoint.get("port")
        p.check(named.get(port) in listen_ports,
                f"the PodMonitor scrapes port {port!r}: the shim's container names {named}, "
                f"--listen opens {sorted(listen_ports)}")
        p.check(endpoint.get("path", "/metrics") == "/metrics",
                f"the PodMonitor scrapes {endpoint.get('path')}")
    job = pod_labels.get(spec.get("jobLabel", ""))
    p.check(up_jobs == {job},
            f"the alerts select up of job {sorted(up_jobs)}, the PodMonitor names the job {job!r}")


def check_dashboard(p, promtool, tmp, dashboard, scrape_samples):
    queries, _ = dashboard_queries(dashboard)
    rules = [{"record": f"dashboard:query_{i}", "expr": substitute(expr)}
             for i, (_, expr) in enumerate(queries)]
    with open(os.path.join(tmp, "dashboard.rules.yaml"), "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False)
    series = []
    for node in ("cp-1", "cp-2"):
        seen = set()
        for name, labels, value in scrape_samples:
            seen.add(name)
            if node == "cp-2":
                value = HOLDING_NODE.get(name, value)
                if name == "shutdown_shim_upstream_probe_failures_total":
                    value = f"0+1x{EVAL_STEPS}"
            series.append((name, labels, node, value))
        if node == "cp-2":
            series += [(n, "", node, v) for n, v in HOLDING_NODE.items() if n not in seen]
        series.append(("up", "", node, "1"))
    input_series = []
    for name, labels, node, value in series:
        extra = "," + labels if labels else ""
        values = value if "x" in value else f"{value}x{EVAL_STEPS}"
        input_series.append({"series": f'{name}{{instance="{node}",job="shutdown-shim"{extra}}}',
                             "values": values})
    test = {"rule_files": ["dashboard.rules.yaml"], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": input_series,
                       "promql_expr_test": [{"expr": f"absent({r['record']})", "eval_time": "5m",
                                             "exp_samples": []} for r in rules]}]}
    with open(os.path.join(tmp, "dashboard.test.yaml"), "w") as f:
        yaml.safe_dump(test, f, sort_keys=False)
    for i, (where, expr) in enumerate(queries):
        print(f"dashboard:query_{i}: {where}: {expr}")
    p.check(run(promtool, ["check", "rules", "dashboard.rules.yaml"], tmp),
            "promtool check rules refuses a query of the dashboard")
    p.check(run(promtool, ["test", "rules", "dashboard.test.yaml"], tmp),
            "a query of the dashboard returns nothing over a scrape of the shim (see above: "
            "absent(dashboard:query_N) is the query N that failed)")
    return {name for _, expr in queries for name in promql_metric_names(expr)}


def main():
    parser = argparse.ArgumentParser()
    for option in ("--rule", "--rule-test", "--dashboard", "--podmonitor", "--daemonset",
                   "--source-root", "--package-docs", "--metrics-source", "--shim"):
        parser.add_argument(option, required=True)
    args = parser.parse_args()
    promtool = os.environ.get("PROMTOOL", "")
    if not promtool:
        return missing_tool("no promtool: install Debian's prometheus package or set PROMTOOL")
    with open(args.rule) as f:
        rule = yaml.safe_load(f)
    if rule.get("apiVersion") != "monitoring.coreos.com/v1" or rule.get("kind") != "PrometheusRule":
        print(f"{args.rule}: not a monitoring.coreos.com/v1 PrometheusRule", file=sys.stderr)
        return 1
    docs = shipped_docs(args.source_root, args.package_docs)
    with open(os.path.join(args.source_root, "docs", "install.md")) as f:
        install_md = f.read()
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    with open(args.podmonitor) as f:
        podmonitor = yaml.safe_load(f)
    with open(args.daemonset) as f:
        daemonset = yaml.safe_load(f)
    with open(args.rule_test) as f:
        rule_test = yaml.safe_load(f)

    p = Problems()
    alerts = check_rule(p, rule, docs, install_md)
    up_jobs = {job for a in alerts for job in re.findall(r'\bup\{job="([^"]+)"', a["expr"])}
    check_podmonitor(p, podmonitor, daemonset, up_jobs)

    families, samples = parse_scrape(scrape_shim(args.shim))
    from_source = source_metric_names(args.metrics_source)
    p.check(families <= from_source,
            f"{args.metrics_source}: the names read from it miss {sorted(families - from_source)}, "
            "which the shim's /metrics has")
    histogram_samples = {f"{f}_{s}" for f in from_source for s in ("bucket", "sum", "count")}
    exported = {name for name, _, _ in samples} | from_source | SCRAPE_SERIES
    exported_or_histogram = exported | histogram_samples

    with tempfile.TemporaryDirectory(prefix="shim-rules-") as tmp:
        with open(os.path.join(tmp, "shutdown-shim.rules.yaml"), "w") as f:
            yaml.safe_dump(rule["spec"], f, sort_keys=False)
        test_copy = os.path.join(tmp, os.path.basename(args.rule_test))
        shutil.copyfile(args.rule_test, test_copy)
        p.check(run(promtool, ["check", "rules", "shutdown-shim.rules.yaml"], tmp),
                "promtool check rules refuses the PrometheusRule")
        p.check(run(promtool, ["test", "rules", test_copy], tmp),
                "promtool test rules: an alert does not do what its test says")
        dashboard_names = check_dashboard(p, promtool, tmp, dashboard, samples)

    used = {"the alerts": {n for a in alerts for n in promql_metric_names(a["expr"])},
            "the alerts' test series": {series_name(s["series"]) for t in rule_test["tests"]
                                        for s in t.get("input_series", [])},
            "the dashboard": dashboard_names | dashboard_queries(dashboard)[1]}
    for where, names in used.items():
        p.check(names and names <= exported_or_histogram,
                f"{where} use {sorted(names - exported_or_histogram)}, which the shim does not "
                f"export (it exports {sorted(exported)})")
        print(f"{where}: {len(names)} metric names, all exported: {sorted(names)}")
    return p.finish(f"{len(alerts)} alerts, {len(dashboard_queries(dashboard)[0])} dashboard "
                    f"queries, the PodMonitor; {len(families)} families in the shim's /metrics")


if __name__ == "__main__":
    sys.exit(main())
