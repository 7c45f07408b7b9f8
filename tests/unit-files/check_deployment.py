#!/usr/bin/python3
"""Checks what ships to nodes (unit-files/) against the shim and against the tools that read it.

One subcommand per meson test: unit, logind-dropin, manifests, haproxy, machineconfig. Each prints
what it checked and exits 1 with every problem it found. Run with /usr/bin/python3: python3-yaml is
a Debian package. manifests reads what `kubectl kustomize` renders (KUBECTL names kubectl); without
one it exits 77 (skipped), except under CI=true, where a skip is a failure.
"""

import argparse
import base64
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

import yaml

# What the shipped files assume of the shim; check_shim_defaults() holds them against its --help.
SHIM_DEFAULT_DRAIN_S = 70
SHIM_DEFAULT_EXIT_TIMEOUT_S = 65
SHIM_DEFAULT_PORT = 6080
DEFAULT_STATE_DIR = "/run/shutdown-shim"
DEFAULT_LOGIND_CONF_DIR = "/etc/systemd/logind.conf.d"
DBUS_SOCKET = "/run/dbus/system_bus_socket"
# Drop-ins our zz- file has to sort after. unattended-upgrades 2.9.1 (Debian 12) ships the first
# in /usr/lib/systemd/logind.conf.d (InhibitDelayMaxSec=30); kubelet's graceful node shutdown
# writes the second (pkg/kubelet/nodeshutdown/systemd: logindConfigDirectory, kubeletLogindConf).
VENDOR_DROPINS = {
    "usr/lib/systemd/logind.conf.d/unattended-upgrades-logind-maxdelay.conf": 30,
    "etc/systemd/logind.conf.d/99-kubelet.conf": 60,
}
SHIM_DROPIN_NAME = "zz-shutdown-shim.conf"
# The upstream check every shipped file turns on (issue 9): kube-apiserver's /readyz on the node,
# verified against kubeadm's cluster CA under the name kubeadm's serving certificate carries
# (cmd/kubeadm/app/util/pkiutil GetAPIServerAltNames: the node name, "kubernetes",
# "kubernetes.default[.svc[.DOMAIN]]", the service IP and the advertise address; no localhost, no
# 127.0.0.1).
UPSTREAM_FLAGS = {
    "--upstream-readyz": ["https://localhost:6443/readyz"],
    "--upstream-ca-file": ["/etc/kubernetes/pki/ca.crt"],
    "--upstream-tls-server-name": ["kubernetes"],
}


class Problems:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
        return ok

    def finish(self, what):
        if self.items:
            print(f"FAIL: {what}: {len(self.items)} problem(s)")
            for item in self.items:
                print(f"  - {item}")
            return 1
        print(f"ok: {what}")
        return 0


def readiness_server_constant(name):
    """A `inline constexpr std::size_t NAME = N;` of src/http/http_limits.hpp, as an int."""
    header = Path(__file__).resolve().parents[2] / "src" / "http" / "http_limits.hpp"
    match = re.search(rf"\b{name}\s*=\s*(\d+)\s*;", header.read_text())
    if not match:
        raise SystemExit(f"{header}: no {name} = N;")
    return int(match.group(1))


def margin_s(hold_s):
    """Mirrors inhibit_delay_margin() in src/logind/logind_config.cpp: 10 % of the hold, at least 5 s."""
    return max(5, math.ceil(hold_s / 10))


def needed_s(drain_s, exit_timeout_s):
    hold = drain_s + exit_timeout_s
    return hold + margin_s(hold)


GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def go_duration_s(text):
    """Go's time.ParseDuration, as the shim takes its durations; seconds as a float."""
    if text in ("0", "+0", "-0"):
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+"):
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * GO_UNITS[u] for n, u in parts)


def systemd_timespan_s(text):
    """The subset of systemd's time spans a unit or logind.conf would use here: 150, 150s, 2min 30s."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 1e-3}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    if not parts or any(u not in units for _, u in parts):
        raise ValueError(f"not a time span: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def shim_accepts(shim, flags):
    """Runs the built shim with flags then --help: it parses flags left to right and stops at
    --help, so this exits 0 exactly when every flag before it is valid."""
    result = subprocess.run([shim, *flags, "--help"], capture_output=True, text=True, timeout=30)
    return result.returncode == 0, result.stderr.strip()


def check_shim_defaults(p, shim):
    """The defaults the built shim prints in --help are the ones the files here rely on."""
    help_text = subprocess.run([shim, "--help"], capture_output=True, text=True, timeout=30,
                               check=True).stdout

    def default_of(flag):
        m = re.search(rf"^\s+{re.escape(flag)}=\S+\s.*\(default ([^)]+)\)$", help_text, re.M)
        return m.group(1) if m else None

    drain, exit_timeout = default_of("--drain-delay"), default_of("--exit-timeout")
    listen = default_of("--listen")
    p.check(drain is not None and go_duration_s(drain) == SHIM_DEFAULT_DRAIN_S,
            f"the shim's --drain-delay default is {drain}, the files assume {SHIM_DEFAULT_DRAIN_S}s")
    p.check(exit_timeout is not None and go_duration_s(exit_timeout) == SHIM_DEFAULT_EXIT_TIMEOUT_S,
            f"the shim's --exit-timeout default is {exit_timeout}, the files assume "
            f"{SHIM_DEFAULT_EXIT_TIMEOUT_S}s")
    p.check(listen is not None and listen.endswith(f":{SHIM_DEFAULT_PORT}"),
            f"the shim's --listen default is {listen}, the files assume port {SHIM_DEFAULT_PORT}")


def check_upstream_flags(p, where, flags):
    for flag, want in UPSTREAM_FLAGS.items():
        p.check(flags.get(flag) == want, f"{where}: {flag} is {flags.get(flag)}, want {want}")


def shim_flag_values(flags):
    """Flag name -> list of values for --name=value flags (the form every file here uses)."""
    values = {}
    for flag in flags:
        name, _, value = flag.partition("=")
        values.setdefault(name, []).append(value)
    return values


# --- the systemd unit ---------------------------------------------------------------------------


def read_unit(path):
    """Section -> list of (key, value), joining continuation lines as systemd does."""
    sections, section, pending = {}, None, ""
    for raw in Path(path).read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            sections.setdefault(section, [])
            continue
        key, _, value = line.partition("=")
        sections[section].append((key.strip(), value.strip()))
    return sections


def unit_values(sections, section, key):
    return [v for k, v in sections.get(section, []) if k == key]


def environment_defaults(sections):
    env = {}
    for value in unit_values(sections, "Service", "Environment"):
        for assignment in shlex.split(value):
            name, _, val = assignment.partition("=")
            env[name] = val
    return env


def commented_defaults(path):
    """The environment file documents each default as a commented-out assignment."""
    env = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"#([A-Z][A-Z0-9_]*)=(.*)$", line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


def expand_exec(command, env):
    """systemd's ExecStart= expansion: $VAR splits at whitespace, ${VAR} stays one word."""
    argv = []
    for word in shlex.split(command):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            argv.extend(env.get(word[1:], "").split())
            continue
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""),
                           word))
    return argv


def check_unit(args):
    p = Problems()
    unit = args.unit
    # verify runs `man` for each Documentation=man: entry: the page as built stands in for the
    # installed one, alone on MANPATH, so that the entry must name it.
    with tempfile.TemporaryDirectory() as manpath:
        page = Path(args.man_page)
        (Path(manpath) / f"man{page.suffix[1:]}").mkdir()
        (Path(manpath) / f"man{page.suffix[1:]}" / page.name).symlink_to(page.resolve())
        verify = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True,
                                text=True, timeout=120, env={**os.environ, "MANPATH": manpath})
    # systemd-analyze only warns (exit 0) about unknown keys or bad values: any output fails.
    output = (verify.stdout + verify.stderr).strip()
    p.check(verify.returncode == 0 and not output,
            f"systemd-analyze verify {unit}: exit {verify.returncode}: {output}")

    check_shim_defaults(p, args.shim)
    s = read_unit(unit)

    def one(key, section="Service"):
        values = unit_values(s, section, key)
        return values[-1] if values else None

    for key, want in [("Type", "notify"), ("NotifyAccess", "main"), ("KillMode", "mixed"),
                      ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                      ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                      ("ProtectKernelLogs", "yes"), ("ProtectControlGroups", "yes"),
                      ("LockPersonality", "yes"), ("MemoryDenyWriteExecute", "yes"),
                      ("RestrictNamespaces", "yes"), ("RestrictSUIDSGID", "yes"),
                      ("SystemCallFilter", "@system-service"),
                      ("LogsDirectory", "shutdown-shim"), ("RuntimeDirectory", "shutdown-shim"),
                      # A crash and its Restart= must keep the record of what was signalled.
                      ("RuntimeDirectoryPreserve", "restart")]:
        p.check(one(key) == want, f"[Service] {key}={one(key)}, want {want}")
    p.check(set((one("RestrictAddressFamilies") or "").split()) == {"AF_UNIX", "AF_INET",
                                                                     "AF_INET6", "AF_NETLINK"},
            f"RestrictAddressFamilies={one('RestrictAddressFamilies')}")
    p.check(set((one("CapabilityBoundingSet") or "").split()) == {"CAP_KILL", "CAP_SYS_BOOT"},
            f"CapabilityBoundingSet={one('CapabilityBoundingSet')}, want CAP_KILL CAP_SYS_BOOT")
    for key in ("ProtectProc", "ProcSubset", "User", "DynamicUser"):
        p.check(one(key) is None, f"{key}= would hide or forbid signalling kube-apiserver")
    after = " ".join(unit_values(s, "Unit", "After")).split()
    for dep in ("dbus.service", "systemd-logind.service", "containerd.service", "crio.service",
                "kubelet.service"):
        p.check(dep in after, f"After= lacks {dep} (the shim must stop before it)")
    # "-": Debian has no such directory by default, and a missing ReadWritePaths= entry fails the
    # start with 226/NAMESPACE; the tmpfiles.d entry creates it at boot.
    p.check("-" + DEFAULT_LOGIND_CONF_DIR in (one("ReadWritePaths") or "").split(),
            f"ReadWritePaths= lacks -{DEFAULT_LOGIND_CONF_DIR} (--ensure-inhibit-delay writes there)")
    tmpfiles = [line.split() for line in Path(args.tmpfiles).read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    p.check(any(f[:2] == ["d", DEFAULT_LOGIND_CONF_DIR] for f in tmpfiles),
            f"{args.tmpfiles} does not create {DEFAULT_LOGIND_CONF_DIR}")
    p.check(one("WantedBy", "Install") == "multi-user.target", "WantedBy= is not multi-user.target")

    # The connection cap is the descriptor limit less the shim's own reserve, up to
    # kMaxConnections: the unit's limit should give exactly that cap, no less (a smaller cap) and
    # no more (descriptors the shim never uses).
    wanted_nofile = (readiness_server_constant("kMaxConnections") +
                     readiness_server_constant("kReservedDescriptors"))
    p.check(one("LimitNOFILE") == str(wanted_nofile),
            f"LimitNOFILE={one('LimitNOFILE')}, want {wanted_nofile} (kMaxConnections + "
            "kReservedDescriptors in src/http/http_limits.hpp)")

    watchdog = one("WatchdogSec")
    p.check(watchdog is not None and 10 <= systemd_timespan_s(watchdog) <= 120,
            f"WatchdogSec={watchdog}, want between 10s and 2min")

    env = environment_defaults(s)
    p.check(any(v.endswith("default/shutdown-shim") for v in
                unit_values(s, "Service", "EnvironmentFile")),
            "no EnvironmentFile=-.../default/shutdown-shim")
    documented = commented_defaults(args.environment_file)
    p.check(documented == env,
            f"{args.environment_file} documents {documented}, the unit's defaults are {env}")

    argv = expand_exec(one("ExecStart"), env)
    p.check(argv and argv[0] == args.shim, f"ExecStart runs {argv[:1]}, want {args.shim}")
    ok, err = shim_accepts(args.shim, argv[1:])
    p.check(ok, f"the shim refuses the unit's flags {argv[1:]}: {err}")
    flags = shim_flag_values(argv[1:])
    p.check(flags.get("--target-name") == ["kube-apiserver"],
            f"--target-name is {flags.get('--target-name')}, want kube-apiserver once")
    p.check(flags.get("--event-log", [""])[0].startswith("/var/log/shutdown-shim/"),
            "--event-log is not under LogsDirectory /var/log/shutdown-shim")
    p.check("--ensure-inhibit-delay" in flags, "--ensure-inhibit-delay is off by default")
    check_upstream_flags(p, "the unit", flags)
    drain = go_duration_s(flags.get("--drain-delay", ["70s"])[0])
    exit_timeout = go_duration_s(flags.get("--exit-timeout", ["65s"])[0])
    p.check((drain, exit_timeout) == (SHIM_DEFAULT_DRAIN_S, SHIM_DEFAULT_EXIT_TIMEOUT_S),
            f"unit defaults drain {drain}s / exit {exit_timeout}s differ from the shim's")
    stop = systemd_timespan_s(one("TimeoutStopSec") or "90")
    p.check(stop >= needed_s(drain, exit_timeout),
            f"TimeoutStopSec={stop:g}s is below drain + exit timeout + margin "
            f"({needed_s(drain, exit_timeout):g}s)")

    # Overriding the target through the environment file must still give the shim one target.
    argv = expand_exec(one("ExecStart"),
                       {**env, "SHUTDOWN_SHIM_TARGET": "--target-pidfile=/run/kube-apiserver.pid"})
    ok, err = shim_accepts(args.shim, argv[1:])
    p.check(ok, f"with SHUTDOWN_SHIM_TARGET overridden the shim refuses {argv[1:]}: {err}")
    # An empty SHUTDOWN_SHIM_UPSTREAM turns the upstream check off, every --upstream-* flag with it
    # (the shim refuses one without --upstream-readyz).
    argv = expand_exec(one("ExecStart"), {**env, "SHUTDOWN_SHIM_UPSTREAM": ""})
    ok, err = shim_accepts(args.shim, argv[1:])
    p.check(ok and not any(a.startswith("--upstream-") for a in argv),
            f"with SHUTDOWN_SHIM_UPSTREAM empty the shim gets {argv[1:]}: {err}")
    return p.finish(f"unit {unit}")


# --- the logind drop-in -------------------------------------------------------------------------


def inhibit_delay_in(text):
    values = re.findall(r"^\s*InhibitDelayMaxSec\s*=\s*(.+?)\s*$", text, re.M)
    return systemd_timespan_s(values[-1]) if values else None


def check_logind_dropin(args):
    p = Problems()
    dropin = Path(args.dropin)
    p.check(dropin.name == SHIM_DROPIN_NAME,
            f"{dropin.name}: --ensure-inhibit-delay writes {SHIM_DROPIN_NAME} to /etc, which "
            "masks the vendor copy only under the same name")
    for vendor in VENDOR_DROPINS:
        p.check(dropin.name > Path(vendor).name,
                f"{dropin.name} does not sort after {Path(vendor).name}")

    s = read_unit(args.unit)
    flags = shim_flag_values(expand_exec(unit_values(s, "Service", "ExecStart")[-1],
                                         environment_defaults(s))[1:])
    drain = go_duration_s(flags["--drain-delay"][0])
    exit_timeout = go_duration_s(flags["--exit-timeout"][0])
    value = inhibit_delay_in(dropin.read_text())
    p.check(value is not None and value >= needed_s(drain, exit_timeout),
            f"InhibitDelayMaxSec={value} is below drain {drain:g}s + exit timeout "
            f"{exit_timeout:g}s + margin = {needed_s(drain, exit_timeout):g}s")

    # Ask systemd itself: cat-config lists logind's files in the order logind applies them.
    with tempfile.TemporaryDirectory() as root:
        for rel, seconds in VENDOR_DROPINS.items():
            path = Path(root, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"[Login]\nInhibitDelayMaxSec={seconds}\n")
        installed = Path(root, args.install_dir.lstrip("/"), dropin.name)
        installed.parent.mkdir(parents=True, exist_ok=True)
        installed.write_text(dropin.read_text())

        def last_file():
            out = subprocess.run(["systemd-analyze", "cat-config", f"--root={root}",
                                  "systemd/logind.conf"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout
            files = re.findall(r"^# (/\S+\.conf)$", out, re.M)
            return files[-1][len(root):] if files else None, files

        last, files = last_file()
        p.check(last == str(Path(args.install_dir, dropin.name)),
                f"logind applies {last} last, not the drop-in installed in {args.install_dir} "
                f"(files in order: {files})")
        # The copy --ensure-inhibit-delay (or an operator) writes to /etc masks the vendor one.
        etc_copy = Path(root, "etc/systemd/logind.conf.d", dropin.name)
        etc_copy.write_text("[Login]\nInhibitDelayMaxSec=400\n")
        last, files = last_file()
        p.check(last == str(Path("/etc/systemd/logind.conf.d", dropin.name)) and
                not any(f.endswith(str(installed)) for f in files),
                f"an /etc copy of {dropin.name} does not mask the vendor one: {files}")
    return p.finish(f"logind drop-in {dropin} (installed in {args.install_dir})")


# --- Kubernetes manifests -----------------------------------------------------------------------


def argv_of(container):
    return [*container.get("command", []), *container.get("args", [])]


def is_shim(container):
    argv = argv_of(container)
    return bool(argv) and os.path.basename(argv[0]) == "shutdown-shim"


def check_pod_spec(p, where, kind, spec, shim_binary):
    """Returns the mode the shim runs in: wrapper, sidecar or daemonset."""
    containers = spec.get("containers", [])
    shims = [c for c in containers if is_shim(c)]
    if not p.check(len(shims) == 1, f"{where}: {len(shims)} shutdown-shim containers, want 1"):
        return None
    shim = shims[0]
    argv = argv_of(shim)
    flags_end = argv.index("--") if "--" in argv else len(argv)
    shim_flags, command = argv[1:flags_end], argv[flags_end + 1:]
    ok, err = shim_accepts(shim_binary, shim_flags)
    p.check(ok, f"{where}: the shim refuses {shim_flags}: {err}")
    flags = shim_flag_values(shim_flags)
    targets = [f for f in ("--target-name", "--target-pid", "--target-pidfile") if f in flags]

    if kind == "DaemonSet":
        mode = "daemonset"
        p.check(spec.get("hostPID") is True, f"{where}: hostPID must be true to see kube-apiserver")
        p.check(flags.get("--target-name") == ["kube-apiserver"],
                f"{where}: want --target-name=kube-apiserver")
    elif command:
        mode = "wrapper"
        p.check(command[0] == "kube-apiserver", f"{where}: wraps {command[0]}, not kube-apiserver")
        p.check(not targets, f"{where}: wrapper mode with {targets} (the shim refuses two targets)")
    else:
        mode = "sidecar"
        p.check(spec.get("shareProcessNamespace") is True,
                f"{where}: a sidecar needs shareProcessNamespace: true")
        p.check(flags.get("--target-name") == ["kube-apiserver"],
                f"{where}: want --target-name=kube-apiserver")
        # kube-apiserver gets its own SIGTERM whenever the pod stops: a second one ends it at once.
        p.check(flags.get("--forward-on-sigterm") == ["never"],
                f"{where}: a sidecar must not forward its SIGTERM (--forward-on-sigterm=never)")
        p.check(any(argv_of(c)[:1] == ["kube-apiserver"] for c in containers),
                f"{where}: no kube-apiserver container next to the shim")

    if kind == "Pod":
        p.check(spec.get("hostNetwork") is True, f"{where}: a static pod needs hostNetwork")
    p.check(spec.get("priorityClassName") == "system-node-critical",
            f"{where}: priorityClassName is not system-node-critical")

    drain = go_duration_s(flags.get("--drain-delay", [f"{SHIM_DEFAULT_DRAIN_S}s"])[0])
    exit_timeout = go_duration_s(
        flags.get("--exit-timeout", [f"{SHIM_DEFAULT_EXIT_TIMEOUT_S}s"])[0])
    grace = spec.get("terminationGracePeriodSeconds", 30)
    p.check(grace >= needed_s(drain, exit_timeout),
            f"{where}: terminationGracePeriodSeconds {grace} < drain {drain:g}s + exit timeout "
            f"{exit_timeout:g}s + margin = {needed_s(drain, exit_timeout):g}s")

    apiserver = next((c for c in containers if "kube-apiserver" in argv_of(c)), None)
    if apiserver is not None:
        api_flags = shim_flag_values(argv_of(apiserver))
        delay = api_flags.get("--shutdown-delay-duration")
        # kube-apiserver serves for its delay, then waits up to 60 s for requests in flight.
        p.check(delay is not None and go_duration_s(delay[0]) + 60 <= drain + exit_timeout,
                f"{where}: kube-apiserver's --shutdown-delay-duration {delay} + 60 s does not fit "
                f"in the hold ({drain + exit_timeout:g}s)")

    ports = [int(a.rpartition(":")[2]) for a in flags.get("--listen", [])] or [SHIM_DEFAULT_PORT]
    probe = (shim.get("readinessProbe") or {}).get("httpGet") or {}
    p.check(probe.get("path") == "/readyz" and probe.get("port") in ports and
            probe.get("scheme", "HTTP") == "HTTP",
            f"{where}: readiness probe {probe} is not HTTP /readyz on the shim's port {ports}")

    sc = shim.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    added = set(caps.get("add") or [])
    needed = set()
    if flags.get("--inhibit", ["auto"])[0] != "off":
        needed.add("SYS_BOOT")  # logind grants the delay lock without polkit
    if mode != "wrapper":
        needed.add("KILL")  # the target is not the shim's child and may run as another user
    p.check(added == needed, f"{where}: adds capabilities {sorted(added)}, needs {sorted(needed)}")
    p.check("ALL" in (caps.get("drop") or []), f"{where}: does not drop ALL capabilities")
    p.check(sc.get("privileged") is not True, f"{where}: privileged: true is more than it needs")
    p.check(sc.get("allowPrivilegeEscalation") is False,
            f"{where}: allowPrivilegeEscalation is not false")
    p.check(sc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem is writable")
    resources = shim.get("resources") or {}
    p.check({"cpu", "memory"} <= set(resources.get("requests") or {}),
            f"{where}: no cpu and memory requests")
    if mode != "wrapper":
        p.check("memory" in (resources.get("limits") or {}), f"{where}: no memory limit")

    volumes = {v["name"]: v for v in spec.get("volumes", [])}

    def host_mount(container_path, writable):
        for m in shim.get("volumeMounts", []):
            if m.get("mountPath") != container_path:
                continue
            host = (volumes.get(m["name"]) or {}).get("hostPath") or {}
            if host.get("path") == container_path and not (writable and m.get("readOnly")):
                return host
        return None

    if flags.get("--inhibit", ["auto"])[0] != "off":
        bus = host_mount(DBUS_SOCKET, writable=True)
        p.check(bus is not None and bus.get("type") == "Socket",
                f"{where}: the host's {DBUS_SOCKET} is not mounted as a Socket hostPath")
    if "--ensure-inhibit-delay" in flags:
        conf_dir = flags.get("--logind-conf-dir", [DEFAULT_LOGIND_CONF_DIR])[0]
        p.check(host_mount(conf_dir, writable=True) is not None,
                f"{where}: --ensure-inhibit-delay without the host's {conf_dir} mounted writable")
    if "--event-log" in flags:
        log_dir = os.path.dirname(flags["--event-log"][0])
        p.check(host_mount(log_dir, writable=True) is not None,
                f"{where}: the event log's {log_dir} is not a writable hostPath (lost at reboot)")
    check_upstream_flags(p, where, flags)
    # The CA's directory, not the file: a file's bind mount keeps the inode it found, so a CA
    # replaced by rename() would never be seen, and kubelet does not start a pod whose File
    # hostPath is missing (the shim itself waits for a missing CA).
    ca_dir = os.path.dirname(flags.get("--upstream-ca-file", [""])[0])
    ca_host = host_mount(ca_dir, writable=False)
    p.check(ca_host is not None and ca_host.get("type") in ("Directory", "DirectoryOrCreate"),
            f"{where}: the CA's directory {ca_dir} is not a Directory hostPath mounted in the shim")
    # The state directory (the shim's lock, its control socket, the record of what was signalled)
    # must be writable (a read-only root has no /run of its own: the shim would not start), must
    # outlive a restart of the container and must not outlive the boot. Inside the volume, not its
    # root: an emptyDir's root is mode 1777, and the shim trusts no record where others may write
    # (it refuses to start; issue 35, item 1).
    state_dir = flags.get("--state-dir", [DEFAULT_STATE_DIR])[0]
    holders = [m for m in shim.get("volumeMounts", [])
               if state_dir.startswith(m.get("mountPath", "").rstrip("/") + "/")]
    state = max(holders, key=lambda m: len(m["mountPath"]), default=None)
    at_root = [m for m in shim.get("volumeMounts", []) if m.get("mountPath") == state_dir]
    empty_dir = (volumes.get(state["name"]) or {}).get("emptyDir") if state else None
    p.check(not at_root and empty_dir is not None and empty_dir.get("medium") == "Memory" and
            not state.get("readOnly"),
            f"{where}: {state_dir} is not a directory inside a writable memory emptyDir (on a "
            "read-only root the shim cannot start; a restarted sidecar would signal "
            "kube-apiserver again; at the volume's root, mode 1777, the shim refuses to start)")
    return mode


# What a kustomization here may use: what kustomize v2.0.3 (Debian 12's kubectl 1.20) reads as
# later ones do. Newer kubectls render more (directories in resources, components), so this is
# held here whichever kubectl the test runs.
KUSTOMIZATION_KEYS = {"resources", "images"}
IMAGE_ENTRY_KEYS = {"name", "newName", "newTag"}
# The placeholders the manifests name; the kustomizations name the images.
SHIM_IMAGE = "shutdown-shim"
WRAPPER_IMAGE = "kube-apiserver-shutdown-shim"
UPSTREAM_IMAGE = "kube-apiserver"
# What the manifests said before they had kustomizations: no image is there.
OLD_REGISTRY = "registry.example.com"


def images_in(obj):
    """The image of every container of every pod spec in obj, wherever the spec sits."""
    if isinstance(obj, dict):
        for key in ("containers", "initContainers", "ephemeralContainers"):
            for c in obj.get(key) or []:
                yield c.get("image")
        for value in obj.values():
            yield from images_in(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from images_in(value)


def render_kustomization(p, kubectl, directory):
    """Checks one kustomization and its resources, and renders it: (documents, image entries,
    the resources' paths)."""
    where = directory.name
    try:
        k = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        p.check(False, f"{where}: no readable kustomization.yaml: {e}")
        return [], {}, set()
    p.check(set(k) <= KUSTOMIZATION_KEYS,
            f"{where}: kustomization.yaml uses {sorted(set(k) - KUSTOMIZATION_KEYS)}, which "
            f"kustomize v2.0.3 does not read as newer ones do (use only "
            f"{sorted(KUSTOMIZATION_KEYS)})")
    entries = {}
    for e in k.get("images") or []:
        name = e.get("name")
        p.check(set(e) == IMAGE_ENTRY_KEYS,
                f"{where}: image entry {e} is not {sorted(IMAGE_ENTRY_KEYS)}")
        p.check(name not in entries, f"{where}: image {name} named twice")
        # A bare word: the registry and the tag are the entry's, never the manifest's.
        p.check(isinstance(name, str) and not re.search(r"[/:@]", name),
                f"{where}: image placeholder {name!r} has a registry or a tag")
        entries[name] = e
    resources = k.get("resources") or []
    p.check(resources, f"{where}: no resources")
    for r in resources:
        raw = directory / r
        # v2.0.3 reads only files at or below the kustomization (a symlink out is refused).
        if not p.check(raw.is_file() and raw.resolve().parent == directory.resolve(),
                       f"{where}: resource {r} is not a file of its own directory"):
            continue
        text = raw.read_text()
        p.check(OLD_REGISTRY not in text, f"{where}/{r}: still names {OLD_REGISTRY}")
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError as e:
            p.check(False, f"{where}/{r}: not YAML: {e}")
            continue
        for image in images_in(documents):
            p.check(image in entries,
                    f"{where}/{r}: image {image!r} is not a placeholder kustomization.yaml names "
                    f"({sorted(entries)})")

    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                            text=True, timeout=60)
    if not p.check(result.returncode == 0,
                   f"{kubectl} kustomize {directory}: exit {result.returncode}: "
                   f"{result.stderr.strip()}"):
        return [], entries, set()
    documents = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    p.check(documents, f"{where}: kubectl kustomize renders nothing")
    named = {f"{e['newName']}:{e['newTag']}": name for name, e in entries.items()}
    rendered = list(images_in(documents))
    for image in rendered:
        p.check(image in named, f"{where}: renders image {image!r}, which is none that "
                f"kustomization.yaml names ({sorted(named)})")
    for image, name in named.items():
        p.check(image in rendered, f"{where}: kustomization.yaml names {name} -> {image}, which "
                "no manifest uses")
    kinds = [d.get("kind") for d in documents]
    # The DaemonSet's base is the one `kubectl apply -k` takes: a static pod in it would become a
    # second kube-apiserver pod that no node's kubelet manages.
    p.check("DaemonSet" not in kinds or "Pod" not in kinds,
            f"{where}: renders a DaemonSet and a Pod: kubectl apply -k would create the Pod")
    print(f"{where}: {kubectl} kustomize renders {kinds}, images {sorted(rendered)}")
    return documents, entries, {(directory / r).resolve() for r in resources}


def missing_tool(message):
    """A tool a check needs is missing: 77 (skipped), or 1 under CI=true, where a skip is a
    failure."""
    if os.environ.get("CI") == "true":
        print(f"FAIL: {message} (CI=true: a skip is a failure)", file=sys.stderr)
        return 1
    print(f"SKIP: {message}", file=sys.stderr)
    return 77


def check_manifests(args):
    """The manifests as `kubectl kustomize` renders each kustomization under ROOT."""
    kubectl = os.environ.get("KUBECTL", "")
    if not kubectl:
        return missing_tool("no kubectl: install Debian's kubernetes-client or set KUBECTL")
    p = Problems()
    check_shim_defaults(p, args.shim)
    root = Path(args.root)
    directories = sorted(k.parent for k in root.glob("**/kustomization.yaml"))
    modes, resources, images = set(), set(), {}
    for directory in directories:
        documents, entries, paths = render_kustomization(p, kubectl, directory)
        resources |= paths
        for name, e in entries.items():
            # One image, one reference, in every kustomization that names it.
            other = images.setdefault(name, (directory.name, e))
            p.check(other[1] == e,
                    f"{directory.name} names {name} as {e}, {other[0]} as {other[1]}")
        for i, doc in enumerate(documents):
            where = f"{directory.name}[{i}] {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            kind = doc.get("kind")
            if kind == "Pod":
                spec = doc.get("spec") or {}
                p.check(doc.get("metadata", {}).get("namespace") == "kube-system",
                        f"{where}: a static control-plane pod belongs in kube-system")
            elif kind == "DaemonSet":
                spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
            else:
                p.check(False, f"{where}: unexpected kind {kind}")
                continue
            mode = check_pod_spec(p, where, kind, spec, args.shim)
            if mode:
                modes.add(mode)
    # Every manifest is some kustomization's resource, so that none escapes the render.
    for manifest in sorted({m.resolve() for d in directories for m in d.glob("*.yaml")
                            if m.name != "kustomization.yaml"}):
        p.check(manifest in resources, f"{manifest}: no kustomization renders it")
    p.check(modes == {"wrapper", "sidecar", "daemonset"},
            f"the manifests cover {sorted(modes)}, want wrapper, sidecar and daemonset")

    # The wrapper's image is the shim's release on top of upstream kube-apiserver, of the version
    # the Containerfile builds it from.
    kube_version = re.search(r"^ARG KUBE_VERSION=(\S+)$", (root / "Containerfile").read_text(),
                             re.M)
    tag = {name: e["newTag"] for name, (_, e) in images.items()}
    if p.check(kube_version and {SHIM_IMAGE, WRAPPER_IMAGE, UPSTREAM_IMAGE} <= set(tag),
               f"want images {SHIM_IMAGE}, {WRAPPER_IMAGE}, {UPSTREAM_IMAGE} and the "
               f"Containerfile's ARG KUBE_VERSION=, have {sorted(tag)} and {kube_version}"):
        p.check(tag[UPSTREAM_IMAGE] == kube_version.group(1),
                f"{UPSTREAM_IMAGE} is {tag[UPSTREAM_IMAGE]}, the Containerfile's KUBE_VERSION "
                f"{kube_version.group(1)}")
        p.check(tag[WRAPPER_IMAGE] == f"{kube_version.group(1)}-{tag[SHIM_IMAGE]}",
                f"{WRAPPER_IMAGE} is tagged {tag[WRAPPER_IMAGE]}, want KUBE_VERSION-SHIM_VERSION "
                f"{kube_version.group(1)}-{tag[SHIM_IMAGE]}")
    return p.finish(f"{len(directories)} kustomizations under {root} as {kubectl} renders them")


# --- OpenShift: the MachineConfig and the KubeletConfig ------------------------------------------

MC_UNIT_NAME = "shutdown-shim.service"
MC_DROPIN_PATH = f"{DEFAULT_LOGIND_CONF_DIR}/{SHIM_DROPIN_NAME}"
MC_IMAGE_VARIABLE = "SHUTDOWN_SHIM_IMAGE"
PODMAN = "/usr/bin/podman"
# /proc/PID/comm holds at most 15 characters (TASK_COMM_LEN 16 with the NUL).
COMM_MAX = 15
# The kube-apiserver container's PID 1 (cluster-kube-apiserver-operator,
# bindata/assets/kube-apiserver/pod.yaml: `exec watch-termination ... -- hyperkube kube-apiserver`).
OPENSHIFT_TARGET = "watch-termination"
OPENSHIFT_KUBELET_CONFIG = "/etc/kubernetes/kubelet.conf"
# kubelet's static pod directory: kube-apiserver's manifest and etcd's (issue 32: whether kubelet
# stops etcd with kube-apiserver).
OPENSHIFT_STATIC_POD_DIR = "/etc/kubernetes/manifests"
# The operator's GracefulTerminationDuration: kube-apiserver's terminationGracePeriodSeconds.
OPENSHIFT_APISERVER_GRACE_S = 135
OPENSHIFT_CRITICAL_PRIORITY = 2000000000
OPENSHIFT_APISERVER_PRIORITY = 2000001000
# TCP ports a master may not give the shim: kube-apiserver-insecure-readyz's 6080, and the ranges
# OpenShift's installation docs reserve on every node (host services, Kubernetes, node ports).
OPENSHIFT_TAKEN_PORTS = [range(6080, 6081), range(6443, 6444), range(9000, 10000),
                         range(10250, 10260), range(30000, 32768), range(2379, 2381),
                         range(22623, 22625), range(17697, 17698)]
# podman options of the unit that take no value; every other one is written --name=value.
PODMAN_BOOLEAN_OPTIONS = {"--rm", "--replace", "--detach", "--read-only"}


def data_url_bytes(url):
    """An RFC 2397 data URL's payload, as Ignition decodes a file's contents.source."""
    if not url.startswith("data:") or "," not in url:
        raise ValueError(f"not a data URL: {url[:40]!r}")
    meta, _, payload = url[5:].partition(",")
    if meta.split(";")[-1] == "base64":
        return base64.b64decode(payload, validate=True)
    return urllib.parse.unquote_to_bytes(payload)


def ini_settings(text):
    """[Section] -> {key: value} of a logind.conf-style file, comments and blank lines left out."""
    settings, section = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            settings.setdefault(section, {})
            continue
        key, _, value = line.partition("=")
        settings.setdefault(section, {})[key.strip()] = value.strip()
    return settings


def load_machineconfig(path):
    """The MachineConfig's document, its drop-in's text and its unit (the Ignition entries)."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    config = ((doc or {}).get("spec") or {}).get("config") or {}
    files = [f for f in (config.get("storage") or {}).get("files") or []
             if f.get("path") == MC_DROPIN_PATH]
    units = [u for u in (config.get("systemd") or {}).get("units") or []
             if u.get("name") == MC_UNIT_NAME]
    dropin = (data_url_bytes(files[0]["contents"]["source"]).decode() if len(files) == 1
              else None)
    return doc, config, dropin, units[0] if len(units) == 1 else None


def podman_run_argv(sections):
    """The unit's ExecStart as systemd runs it: [podman, run, OPTIONS..., IMAGE, SHIM FLAGS...]."""
    return expand_exec(unit_values(sections, "Service", "ExecStart")[-1],
                       environment_defaults(sections))


def split_podman_run(argv):
    """(podman options as a list of (name, value or None), image, the shim's flags). An option
    that is neither --name=value nor a known boolean one ends the options as the image would."""
    options, i = [], 2
    while i < len(argv) and argv[i].startswith("--"):
        name, eq, value = argv[i].partition("=")
        if not eq and name not in PODMAN_BOOLEAN_OPTIONS:
            break
        options.append((name, value if eq else None))
        i += 1
    image = argv[i] if i < len(argv) else None
    return options, image, argv[i + 1:]


def volume_mounts(options):
    """container path -> (host path, mount options) of every --volume=HOST:CONTAINER[:OPTS]."""
    mounts = {}
    for name, value in options:
        if name == "--volume":
            host, _, rest = value.partition(":")
            container, _, opts = rest.partition(":")
            mounts[container] = (host, opts.split(",") if opts else [])
    return mounts


def mounted_at(mounts, path):
    """The mount that makes `path` in the container the host's same path, or None."""
    for container, (host, opts) in mounts.items():
        if host == container and (path == container or path.startswith(container + "/")):
            return container, opts
    return None


def check_machineconfig(args):
    # systemd-analyze verify wants ExecStart's binary: podman (scripts/deps.sh installs it).
    if not os.access(PODMAN, os.X_OK):
        return missing_tool(f"no {PODMAN}, which systemd-analyze verify needs for ExecStart")
    p = Problems()
    check_shim_defaults(p, args.shim)
    doc, config, dropin, unit = load_machineconfig(args.machineconfig)
    p.check(doc.get("apiVersion") == "machineconfiguration.openshift.io/v1" and
            doc.get("kind") == "MachineConfig",
            f"{doc.get('apiVersion')} {doc.get('kind')}, want a v1 MachineConfig")
    labels = (doc.get("metadata") or {}).get("labels") or {}
    p.check(labels.get("machineconfiguration.openshift.io/role") == "master",
            f"role label {labels}, want master")
    version = str((config.get("ignition") or {}).get("version"))
    p.check(re.fullmatch(r"3\.[0-4]\.0", version) is not None, f"Ignition {version}, want 3.x")

    # The drop-in: logind's settings exactly as the Debian package's file, where logind reads
    # local drop-ins (RHCOS' /usr is read-only).
    want = ini_settings(Path(args.dropin).read_text())
    if p.check(dropin is not None, f"no single storage.files entry for {MC_DROPIN_PATH}"):
        p.check(ini_settings(dropin) == want,
                f"the drop-in says {ini_settings(dropin)}, {args.dropin} says {want}")
    inhibit_max = inhibit_delay_in(dropin or "")

    if not p.check(unit is not None and unit.get("enabled") is True,
                   f"no enabled systemd.units entry {MC_UNIT_NAME}"):
        return p.finish(f"MachineConfig {args.machineconfig}")
    with tempfile.TemporaryDirectory() as tmp:
        unit_path = Path(tmp, MC_UNIT_NAME)
        unit_path.write_text(unit["contents"])
        verify = subprocess.run(["systemd-analyze", "verify", str(unit_path)],
                                capture_output=True, text=True, timeout=120)
        output = (verify.stdout + verify.stderr).strip()
        p.check(verify.returncode == 0 and not output,
                f"systemd-analyze verify {MC_UNIT_NAME}: exit {verify.returncode}: {output}")
        s = read_unit(unit_path)

    def one(key, section="Service"):
        values = unit_values(s, section, key)
        return values[-1] if values else None

    for key, want_value in [("Type", "notify"), ("NotifyAccess", "all"), ("KillMode", "mixed"),
                            ("RuntimeDirectory", "shutdown-shim"),
                            ("RuntimeDirectoryPreserve", "restart"),
                            ("LogsDirectory", "shutdown-shim")]:
        p.check(one(key) == want_value, f"[Service] {key}={one(key)}, want {want_value}")
    p.check(one("WantedBy", "Install") == "multi-user.target", "WantedBy= is not multi-user.target")
    after = " ".join(unit_values(s, "Unit", "After")).split()
    for dep in ("dbus.service", "systemd-logind.service", "crio.service", "kubelet.service"):
        p.check(dep in after, f"After= lacks {dep} (the shim must stop before it)")

    # The image is named once: the unit's SHUTDOWN_SHIM_IMAGE, and nowhere else in the file.
    image_default = environment_defaults(s).get(MC_IMAGE_VARIABLE)
    text = Path(args.machineconfig).read_text()
    p.check(image_default and text.count(image_default) == 1,
            f"{MC_IMAGE_VARIABLE}={image_default} is not the one place the image is named")

    argv = podman_run_argv(s)
    p.check(argv[:2] == [PODMAN, "run"], f"ExecStart runs {argv[:2]}, want {PODMAN} run")
    options, image, shim_flags = split_podman_run(argv)
    p.check(image == image_default, f"podman runs image {image}, not ${MC_IMAGE_VARIABLE}")
    opts = {}
    for name, value in options:
        opts.setdefault(name, []).append(value)
    for flag, want_value in [("--rm", [None]), ("--replace", [None]), ("--read-only", [None]),
                             ("--sdnotify", ["container"]), ("--pid", ["host"]),
                             ("--network", ["host"]), ("--cap-drop", ["all"])]:
        p.check(opts.get(flag) == want_value, f"podman {flag} is {opts.get(flag)}, want "
                f"{want_value}")
    p.check(len(opts.get("--name", [])) == 1, "podman runs no single --name (--replace needs it)")
    caps = {c for v in opts.get("--cap-add", []) for c in v.split(",")}
    p.check(caps == {"CAP_KILL", "CAP_SYS_BOOT"}, f"--cap-add {sorted(caps)}, want CAP_KILL and "
            "CAP_SYS_BOOT only")
    security = set(opts.get("--security-opt", []))
    p.check("no-new-privileges" in security, "no --security-opt=no-new-privileges")
    p.check(security & {"label=type:spc_t", "label=disable"},
            f"--security-opt {sorted(security)}: container_t may neither reach the system bus nor "
            "signal another container's process")
    p.check("--privileged" not in opts, "--privileged is more than the shim needs")
    # An --ulimit replaces containers.conf's default_ulimits (nproc too); the shim caps its
    # connections itself.
    p.check("--ulimit" not in opts, f"--ulimit {opts.get('--ulimit')}")
    p.check(os.path.basename((opts.get("--entrypoint") or [""])[0]) == "shutdown-shim",
            f"--entrypoint {opts.get('--entrypoint')}, want the shim")
    mounts = volume_mounts(options)
    for container, (host, mount_opts) in mounts.items():
        # :z/:Z would relabel the host's files (the bus socket, /etc/kubernetes) for this container.
        p.check(not {"z", "Z"} & set(mount_opts), f"--volume {host}: relabelled ({mount_opts})")

    ok, err = shim_accepts(args.shim, shim_flags)
    p.check(ok, f"the shim refuses the unit's flags {shim_flags}: {err}")
    flags = shim_flag_values(shim_flags)
    p.check(flags.get("--target-name") == [OPENSHIFT_TARGET],
            f"--target-name is {flags.get('--target-name')}, want {OPENSHIFT_TARGET}")
    ports = [int(a.rpartition(":")[2]) for a in flags.get("--listen", [])]
    p.check(ports and not any(port in r for port in ports for r in OPENSHIFT_TAKEN_PORTS),
            f"--listen ports {ports or [SHIM_DEFAULT_PORT]} collide with OpenShift's on a master")
    p.check(flags.get("--kubelet-config") == [OPENSHIFT_KUBELET_CONFIG] and
            flags.get("--static-pod-manifest") == [OPENSHIFT_STATIC_POD_DIR],
            f"kubelet files {flags.get('--kubelet-config')} {flags.get('--static-pod-manifest')}, "
            f"want {OPENSHIFT_KUBELET_CONFIG} and {OPENSHIFT_STATIC_POD_DIR}")
    p.check("--ensure-inhibit-delay" not in flags,
            "--ensure-inhibit-delay would rewrite the drop-in MCO owns (config drift)")
    p.check(not any(f.startswith("--upstream-") for f in flags),
            "an upstream check on OpenShift needs a CA path that stays (see the unit's comment)")
    p.check(mounted_at(mounts, DBUS_SOCKET) is not None,
            f"the host's {DBUS_SOCKET} is not mounted at the same path")
    # Every path the shim reads or writes is the host's, mounted at the same place.
    log_dir = os.path.dirname(flags.get("--event-log", [""])[0])
    state_dir = flags.get("--state-dir", [DEFAULT_STATE_DIR])[0]
    for path, writable in [(log_dir, True), (state_dir, True),
                           (OPENSHIFT_KUBELET_CONFIG, False), (OPENSHIFT_STATIC_POD_DIR, False),
                           (flags.get("--logind-conf-dir", [DEFAULT_LOGIND_CONF_DIR])[0], False)]:
        mount = mounted_at(mounts, path)
        p.check(mount is not None and not (writable and "ro" in mount[1]),
                f"{path} is not the host's{' (writable)' if writable else ''} in the container")
    # A file's bind mount keeps the inode it found: the operator's rename of a new revision's
    # manifest would never be seen (kubelet.conf changes only with a reboot, a new container).
    manifest_mount = mounted_at(mounts, OPENSHIFT_STATIC_POD_DIR)
    p.check(manifest_mount is not None and manifest_mount[0] == OPENSHIFT_STATIC_POD_DIR,
            "the static pod directory is not mounted as a directory")
    p.check(log_dir == "/var/log/shutdown-shim" and state_dir == DEFAULT_STATE_DIR,
            f"event log in {log_dir}, state in {state_dir}: not the unit's LogsDirectory and "
            "RuntimeDirectory")

    # podman stop gives the SIGTERM path its hold; systemd waits longer than podman.
    drain = go_duration_s(flags.get("--drain-delay", [f"{SHIM_DEFAULT_DRAIN_S}s"])[0])
    exit_timeout = go_duration_s(
        flags.get("--exit-timeout", [f"{SHIM_DEFAULT_EXIT_TIMEOUT_S}s"])[0])
    hold = needed_s(drain, exit_timeout)
    stop_timeout = int((opts.get("--stop-timeout") or ["10"])[0])
    p.check(stop_timeout >= hold, f"--stop-timeout={stop_timeout} is below drain + exit timeout "
            f"+ margin ({hold:g}s)")
    stop = systemd_timespan_s(one("TimeoutStopSec") or "90")
    p.check(stop > stop_timeout, f"TimeoutStopSec={stop:g}s does not outlast podman stop's "
            f"{stop_timeout}s")
    p.check(inhibit_max is not None and inhibit_max >= hold,
            f"InhibitDelayMaxSec={inhibit_max} is below the hold ({hold:g}s)")

    # The KubeletConfig: kube-apiserver's group outlasts the hold and the pod's grace, kubelet's
    # total fits in the drop-in's InhibitDelayMaxSec (which sorts after 99-kubelet.conf).
    with open(args.kubeletconfig) as f:
        kc = yaml.safe_load(f)
    p.check(kc.get("kind") == "KubeletConfig" and
            ((kc.get("spec") or {}).get("machineConfigPoolSelector") or {}).get("matchLabels") ==
            {"pools.operator.machineconfiguration.openshift.io/master": ""},
            "the KubeletConfig does not select the master pool")
    kubelet = (kc.get("spec") or {}).get("kubeletConfig") or {}
    total = go_duration_s(kubelet.get("shutdownGracePeriod", "0"))
    critical = go_duration_s(kubelet.get("shutdownGracePeriodCriticalPods", "0"))
    p.check(OPENSHIFT_APISERVER_PRIORITY >= OPENSHIFT_CRITICAL_PRIORITY and
            critical >= max(drain + exit_timeout, OPENSHIFT_APISERVER_GRACE_S),
            f"shutdownGracePeriodCriticalPods {critical:g}s: kubelet's SIGKILL would cut the "
            f"drain ({drain + exit_timeout:g}s) or the pod's {OPENSHIFT_APISERVER_GRACE_S}s")
    p.check(critical < total <= (inhibit_max or 0),
            f"shutdownGracePeriod {total:g}s: not above the critical pods' {critical:g}s, or "
            f"above logind's InhibitDelayMaxSec {inhibit_max}")
    print(f"{MC_UNIT_NAME}: image {image}, podman stop {stop_timeout}s for a hold of {hold:g}s, "
          f"listen {ports}; kubelet groups {total - critical:g}s + {critical:g}s, logind "
          f"InhibitDelayMaxSec {inhibit_max}")
    return p.finish(f"MachineConfig {args.machineconfig} and KubeletConfig {args.kubeletconfig}")


# --- HAProxy ------------------------------------------------------------------------------------

HAPROXY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400, "": 1e-3}


def haproxy_time_s(text):
    m = re.fullmatch(r"(\d+)(us|ms|s|m|h|d|)", text)
    if not m:
        raise ValueError(f"not an HAProxy time: {text!r}")
    return int(m.group(1)) * HAPROXY_UNITS[m.group(2)]


def server_options(words):
    """inter, fall and port from a server or default-server line's keywords."""
    opts = {}
    for key in ("inter", "fall", "port"):
        if key in words and words.index(key) + 1 < len(words):
            opts[key] = words[words.index(key) + 1]
    opts["check"] = "check" in words
    return opts


def check_haproxy(args):
    p = Problems()
    result = subprocess.run(["haproxy", "-c", "-f", args.cfg], capture_output=True, text=True,
                            timeout=60)
    p.check(result.returncode == 0,
            f"haproxy -c -f {args.cfg}: exit {result.returncode}: {result.stderr.strip()}")

    s = read_unit(args.unit)
    flags = shim_flag_values(expand_exec(unit_values(s, "Service", "ExecStart")[-1],
                                         environment_defaults(s))[1:])
    drain = go_duration_s(flags["--drain-delay"][0])

    # HAProxy's defaults: inter 2s, fall 3, timeout check = inter.
    defaults = {"inter": "2s", "fall": "3", "port": None, "check": False}
    timeout_check = None
    section, httpchk, expect, uri = None, {}, {}, {}
    servers = []
    for raw in Path(args.cfg).read_text().splitlines():
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if not raw[0].isspace():
            section = " ".join(words[:2])
            section_defaults = dict(defaults)
            continue
        if words[:2] == ["timeout", "check"]:
            timeout_check = haproxy_time_s(words[2])
        elif words[:2] == ["option", "httpchk"]:
            httpchk[section] = True
            if len(words) >= 4:
                uri[section] = words[3]
        elif words[:2] == ["http-check", "send"] and "uri" in words:
            uri[section] = words[words.index("uri") + 1]
        elif words[:3] == ["http-check", "expect", "status"]:
            expect[section] = words[3]
        elif words[0] == "default-server":
            section_defaults.update({k: v for k, v in server_options(words).items() if v})
        elif words[0] == "server":
            servers.append((section, words[1], {**section_defaults,
                                                **{k: v for k, v in server_options(words).items()
                                                   if v}}))
    p.check(servers, f"{args.cfg}: no servers")
    for section, name, opts in servers:
        where = f"{section} server {name}"
        p.check(opts["check"], f"{where}: not health-checked")
        p.check(httpchk.get(section) and uri.get(section) == "/readyz",
                f"{where}: the check is not an HTTP GET of /readyz")
        p.check(expect.get(section) == "200", f"{where}: a 503 must fail the check "
                "(http-check expect status 200)")
        p.check(opts["port"] == str(SHIM_DEFAULT_PORT),
                f"{where}: checks port {opts['port']}, not the shim's {SHIM_DEFAULT_PORT}")
        inter, fall = haproxy_time_s(opts["inter"]), int(opts["fall"])
        worst = inter * fall + (timeout_check if timeout_check is not None else inter)
        p.check(inter * fall < drain and worst < drain,
                f"{where}: inter {inter:g}s x fall {fall} (+ timeout check = {worst:g}s) is not "
                f"below the drain delay {drain:g}s")
        print(f"{where}: inter {inter:g}s x fall {fall} = {inter * fall:g}s, at most {worst:g}s "
              f"with the check timeout; drain {drain:g}s")
    return p.finish(f"haproxy example {args.cfg}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    unit = sub.add_parser("unit")
    unit.add_argument("--unit", required=True)
    unit.add_argument("--environment-file", required=True)
    unit.add_argument("--shim", required=True)
    unit.add_argument("--tmpfiles", required=True)
    unit.add_argument("--man-page", required=True, help="the built man page, e.g. shutdown-shim.8")
    dropin = sub.add_parser("logind-dropin")
    dropin.add_argument("--dropin", required=True)
    dropin.add_argument("--install-dir", required=True)
    dropin.add_argument("--unit", required=True)
    manifests = sub.add_parser("manifests")
    manifests.add_argument("--shim", required=True)
    manifests.add_argument("root", help="unit-files/kubernetes: every kustomization below it")
    haproxy = sub.add_parser("haproxy")
    haproxy.add_argument("--cfg", required=True)
    haproxy.add_argument("--unit", required=True)
    machineconfig = sub.add_parser("machineconfig")
    machineconfig.add_argument("--machineconfig", required=True)
    machineconfig.add_argument("--kubeletconfig", required=True)
    machineconfig.add_argument("--dropin", required=True)
    machineconfig.add_argument("--shim", required=True)
    args = parser.parse_args()
    checks = {"unit": check_unit, "logind-dropin": check_logind_dropin,
              "manifests": check_manifests, "haproxy": check_haproxy,
              "machineconfig": check_machineconfig}
    return checks[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
