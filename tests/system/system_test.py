#!/usr/bin/env python3
"""The `system` suite: shutdown-shim installed as a package into a Debian container (12, 13 or sid:
--release) and driven through real systemd, logind and dbus under systemd-nspawn.

Each case boots a container of its own (its own PID 1, journald, dbus-daemon and logind, and only
a loopback interface) from overlay layers: the cached debootstrap root file system
(scripts/debian-rootfs); the bare node layer (a stand-in container runtime running
kube-apiserver, a /readyz watcher, and the .deb that scripts/package --deb-only built); the
package layer, in which apt-get installed that .deb as an operator does, before the node's first
boot (the install case, which installs it on the booted node, leaves this one out); and the
case's own writable layer. The mounts live in a private mount namespace of this process, each
container runs in a cgroup of its own, and nothing is stopped but by the PID this driver started.

The container shares the machine's CLOCK_MONOTONIC, so the journal's __MONOTONIC_TIMESTAMP, the
shim's event log (monotonic_us), the stand-in apiserver's logs and this driver's clock all read
the same clock. Checks are about order, counts and lower bounds; times are reported, never bounded
from above (the machines are shared and slow).

  tests/system/system_test.py --build-root BUILD [--release R] [--case NAME]... [--jobs N] [--keep]

Exit status: 0 every case passed, 1 a case failed, 77 skipped (no root, systemd-nspawn, overlayfs
or root file system), which under CI=true is a failure instead."""

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]

# The releases the package is proven on (scripts/debian-rootfs builds each root). This machine
# mounts cgroups in hybrid mode: nspawn then gives the container the same, which systemd 258 and
# later refuse ("Detected unsupported legacy cgroup hierarchy, refusing execution", PID 1 exits
# 255 at once) and 256 and later only warn about. From 13 on the container gets the unified
# hierarchy alone, as those releases boot a node by default (SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1;
# the host's v1 hierarchies keep every controller, so no resource limit applies inside).
RELEASES = {"bookworm": {"debian": "12", "unified": False},
            "trixie": {"debian": "13", "unified": True},
            "sid": {"debian": "sid", "unified": True}}


def message_id(kind: str) -> str:
    """An event kind's journal MESSAGE_ID, from the one table of them (src/log/event_kind.hpp)."""
    table = (REPO / "src/log/event_kind.hpp").read_text()
    found = re.search(r'\{"%s", log_level::\w+, "([0-9a-f]{32})"\}' % re.escape(kind), table)
    if not found:
        raise RuntimeError(f"no MESSAGE_ID for {kind} in src/log/event_kind.hpp")
    return found.group(1)
GUEST = REPO / "tests" / "system" / "guest"
VM_GUEST = REPO / "tests" / "vm" / "guest"

# The shim's settings in every case (written to the installed /etc/default/shutdown-shim). The
# drain is above logind's 5 s default so that a hold cut by it shows; the stand-in apiserver's
# own shutdown delay lies between the two, like kube-apiserver's --shutdown-delay-duration.
DRAIN_S = 7
EXIT_TIMEOUT_S = 20
APISERVER_SHUTDOWN_DELAY = "6s"
UPSTREAM = "--upstream-readyz=http://127.0.0.1:6443/readyz"  # guest/container-runtime's --listen
# The stand-in's lifecycle log of a kube-apiserver that started and was never signalled (its port,
# then /readyz 200, as k8s.io/apiserver's start-up; commit 6eff0bc added READY).
APISERVER_RUNNING = ["LISTENING", "READY"]
WATCHDOG_S = 5  # the lifecycle case's WatchdogSec= (the shipped 30 s would make the case slow)
KUBELET_GRACE_S = 12  # the stand-in kubelet's hold in kill-hold: longer than the drain
KUBELET_DROPIN_S = 300  # item 3: kubelet's 99-kubelet.conf above the shim's vendor 150 s
SECURITY_EXPOSURE_MAX = 2.3  # `systemd-analyze security` of the unit when this suite was added
# Where the bare node keeps the .deb (the operator's copy): install, upgrade and the node layer
# install it from there.
PACKAGE_DIR = Path("/var/cache/system-test")
SETTINGS_MARK = "# system test"  # heads the settings appended to /etc/default/shutdown-shim
US = 1_000_000
CAP_KILL = 1 << 5
CAP_SYS_BOOT = 1 << 22

# What the harness gives every process it starts: no system bus at all (the machine's must never
# be reached; inside a container, `env -i` below lets the container's default apply).
NO_BUS = "unix:path=/nonexistent/shutdown-shim-tests/no-bus"
CONTAINER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def now_us():
    return time.monotonic_ns() // 1000


def run(argv, check=True, timeout=120, **kw):
    return subprocess.run(argv, check=check, timeout=timeout, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def ms(t, since):
    return "-" if t is None or since is None else f"{(t - since) / 1000:.0f} ms"


@dataclasses.dataclass
class Result:
    name: str
    failures: list = dataclasses.field(default_factory=list)
    facts: dict = dataclasses.field(default_factory=dict)

    def expect(self, condition, what):
        if not condition:
            self.failures.append(what)
        return bool(condition)


class Overlay:
    """An overlayfs mount: lowers (top first), and an upper layer of its own under directory."""

    def __init__(self, lowers, directory: Path):
        self.lowers = [str(p) for p in lowers]
        self.upper = directory / "upper"
        self.work = directory / "work"
        self.root = directory / "root"

    def mount(self):
        for d in (self.upper, self.work, self.root):
            d.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={':'.join(self.lowers)},upperdir={self.upper},workdir={self.work}"
        run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)])

    def unmount(self):
        run(["umount", str(self.root)], check=False)


class Journal:
    """A container's journal (read from its file system), in time order."""

    def __init__(self, root: Path):
        out = run(["journalctl", f"--root={root}", "-o", "json", "--no-pager", "--all"],
                  check=False, timeout=120).stdout
        self.entries = []
        for line in out.splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            message = entry.get("MESSAGE") or ""
            if isinstance(message, list):  # journalctl's form for non-UTF-8 messages
                message = bytes(message).decode(errors="replace")
            entry["MESSAGE"] = message
            self.entries.append((int(entry["__MONOTONIC_TIMESTAMP"]), entry))
        self.entries.sort(key=lambda e: e[0])

    def all(self, predicate, after=0):
        return [(t, e["MESSAGE"]) for t, e in self.entries if t >= after and predicate(e)]

    def first(self, predicate, after=0):
        found = self.all(predicate, after)
        return found[0] if found else (None, None)

    def text(self):
        return "\n".join(f"{t / 1e6:12.6f} {e.get('SYSLOG_IDENTIFIER', '?')}[{e.get('_PID', '')}]: "
                         f"{e['MESSAGE']}" for t, e in self.entries)


def from_pid1(text):
    return lambda e: e.get("_PID") == "1" and e["MESSAGE"].startswith(text)


def runtime_stop(entry):
    """The stand-in runtime's ExecStop: whether kube-apiserver's scope was still there."""
    return entry["MESSAGE"].startswith(("container-runtime: stopping",
                                        "container-runtime: kube-apiserver.scope is already"))


def from_logind(text):
    return lambda e: e.get("SYSLOG_IDENTIFIER") == "systemd-logind" and text in e["MESSAGE"]


def in_cgroups(cgroups, argv):
    """argv, started in cgroups of its own. The container's PID 1 (systemd or nspawn's stub) makes
    the cgroup it starts in its own: one per container, so that parallel containers never share
    "payload" and "supervisor"."""
    join = ('for c in "$@"; do [ "$c" = -- ] && break; echo $$ >"$c/cgroup.procs"; shift; '
            'done; shift; exec "$@"')
    return ["sh", "-c", join, "sh", *map(str, cgroups), "--", *argv]


class Node:
    """One boot of the node: systemd-nspawn -b on an overlay root, driven with nsenter."""

    def __init__(self, name, overlay: Overlay, directory: Path, cgroup_parent, unified: bool):
        self.name = name
        self.unified = unified
        self.console = None
        self.root = overlay.root
        self.dir = directory
        self.cgroups = [Path("/sys/fs/cgroup") / h / cgroup_parent / name
                        for h in ("systemd", "unified")]
        self.nspawn = None
        self.pid1 = None
        self.booted_us = None

    def start(self):
        """Boots the node; again after a reboot, on the same root (nspawn gives each boot its own
        boot id)."""
        self.pid1 = None
        for cgroup in self.cgroups:
            cgroup.mkdir(parents=True, exist_ok=True)
        argv = in_cgroups(self.cgroups, [
            "systemd-nspawn", "--boot", f"--directory={self.root}", f"--machine={self.name}",
            "--register=no", "--keep-unit", "--private-network", "--console=pipe",
            "--link-journal=no"])
        self.console = open(self.dir / "console.log", "a")
        # Unset, not "0", for 12: "0" is the legacy v1 layout alone, in which a container's
        # systemd misses cgroup-empty events (the ensure case waited out a 90 s stop timeout on
        # an empty cgroup, twice); unset, nspawn gives it the machine's hybrid layout.
        env = {k: v for k, v in os.environ.items() if k != "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"}
        env["DBUS_SYSTEM_BUS_ADDRESS"] = NO_BUS
        if self.unified:
            env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        self.nspawn = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.console,
                                       stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 60
        while self.pid1 is None:
            if self.nspawn.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {self.nspawn.returncode}: "
                                   + (self.dir / "console.log").read_text()[-2000:])
            for task in Path(f"/proc/{self.nspawn.pid}/task").glob("*/children"):
                for child in task.read_text().split():
                    try:
                        if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                            self.pid1 = int(child)
                    except OSError:
                        pass
            if time.monotonic() > deadline:
                raise RuntimeError("the container's systemd never appeared")
            time.sleep(0.05)
        self.wait_for(lambda: self.sh("systemctl", "is-system-running", check=False)
                      .stdout.strip() in ("running", "degraded"), 120,
                      "systemctl is-system-running: running")
        self.booted_us = now_us()

    def sh(self, *argv, check=True, timeout=60):
        """Runs argv inside the container: its namespaces, its root, a clean environment."""
        cmd = ["nsenter", f"--target={self.pid1}", "--mount", "--uts", "--ipc", "--net", "--pid",
               "--", "env", "-i", CONTAINER_PATH, *argv]
        return run(cmd, check=check, timeout=timeout)

    def curl(self, path="/readyz"):
        """GET on the shim's port from the container's network namespace (the machine's curl)."""
        out = run(["nsenter", f"--target={self.pid1}", "--net", "--", "curl", "-s", "-o",
                   "/dev/null", "-w", "%{http_code}", "--max-time", "2",
                   f"http://127.0.0.1:6080{path}"], check=False).stdout.strip()
        return out or "down"

    def unit(self, prop, unit="shutdown-shim.service"):
        return self.sh("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()

    def logind_delay_us(self):
        out = self.sh("busctl", "get-property", "org.freedesktop.login1", "/org/freedesktop/login1",
                      "org.freedesktop.login1.Manager", "InhibitDelayMaxUSec").stdout.split()
        return int(out[1])

    def inhibitors(self):
        return self.sh("systemd-inhibit", "--list", "--no-pager", "--no-legend").stdout

    def delay_locks(self):
        """logind's delay locks on shutdown, from ListInhibitors: [(who, pid)]."""
        out = self.sh("busctl", "--json=short", "call", "org.freedesktop.login1",
                      "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                      "ListInhibitors").stdout
        return [(who, str(pid)) for what, who, _why, mode, _uid, pid in json.loads(out)["data"][0]
                if mode == "delay" and "shutdown" in what.split(":")]

    def apt(self, *args, log=None):
        """apt-get as an operator runs it on the node (no questions asked); its output goes to
        log. A failure ends the case with apt's last lines."""
        out = self.sh("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", "-q", *args,
                      check=False, timeout=300)
        if log:
            with open(self.dir / log, "a") as f:
                f.write(f"$ apt-get {' '.join(args)}\n{out.stdout}\n")
        if out.returncode != 0:
            raise RuntimeError(f"apt-get {' '.join(args)} exited {out.returncode}: "
                               + out.stdout[-1500:])
        return out.stdout

    def alive(self, pid):
        return self.sh("test", "-d", f"/proc/{pid}", check=False).returncode == 0

    def apiserver_pid(self):
        return self.sh("cat", "/run/kube-apiserver.pid", check=False).stdout.strip()

    def apiserver_lifecycle(self):
        """The stand-in's lifecycle log: [WORD] (LISTENING, READY, UNREADY, ..., EXIT)."""
        path = self.root / "var/log/system-test/apiserver-lifecycle.log"
        try:
            return [line.split()[0] for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def journal(self):
        self.sh("journalctl", "--sync", check=False)
        return Journal(self.root)

    def events(self):
        path = self.root / "var/log/shutdown-shim/events.jsonl"
        try:
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def apiserver_signals(self):
        path = self.root / "var/log/system-test/apiserver-signals.log"
        try:
            return [int(line.split()[1]) for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.1)

    def wait_ready(self, after_event=0, timeout=90):
        """The shim answers 200, holds its lock (an InhibitorTaken after event #after_event) and
        kube-apiserver runs."""
        def ready():
            taken = [e for e in self.events()[after_event:] if e["event"] == "InhibitorTaken"]
            return (taken and self.curl() == "200"
                    and self.sh("test", "-s", "/run/kube-apiserver.pid", check=False)
                    .returncode == 0)
        self.wait_for(ready, timeout, "the shim ready, its lock taken and kube-apiserver running")
        return now_us()

    def wait_exit(self, timeout):
        try:
            return self.nspawn.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def power_off_now(self):
        """Ends a case that does not reboot: no unit is stopped, everything is killed."""
        self.sh("journalctl", "--sync", check=False)
        self.sh("systemctl", "poweroff", "--force", "--no-block", check=False)
        self.wait_exit(60)

    def stop(self):
        """Whatever state the case left: the container's PID 1 killed (its PID namespace goes with
        it), systemd-nspawn reaped, the cgroups removed."""
        if self.nspawn and self.nspawn.poll() is None:
            if self.pid1:
                try:
                    os.kill(self.pid1, 9)
                except ProcessLookupError:
                    pass
            if self.wait_exit(30) is None:
                self.nspawn.kill()
                self.nspawn.wait()
        if self.console:
            self.console.close()
        for cgroup in self.cgroups:
            remove_cgroup(cgroup)


def remove_cgroup(cgroup: Path):
    """Removes a cgroup tree once its last process has gone (that can take a moment)."""
    deadline = time.monotonic() + 10
    while cgroup.exists():
        try:
            for d in sorted((p for p in cgroup.rglob("*") if p.is_dir()), reverse=True):
                d.rmdir()
            cgroup.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# --- the cases ---------------------------------------------------------------------------------

def write(path: Path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def no_vendor_dropin(root: Path):
    # logind then falls back to its built-in InhibitDelayMaxSec=5 (a whiteout in the case layer).
    (root / "usr/lib/systemd/logind.conf.d/zz-shutdown-shim.conf").unlink()


def kubelet_dropin(root: Path):
    # What kubelet writes for shutdownGracePeriod=300s (pkg/kubelet/nodeshutdown/systemd).
    write(root / "etc/systemd/logind.conf.d/99-kubelet.conf",
          f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={KUBELET_DROPIN_S}\n")


def watchdog_dropin(root: Path):
    write(root / "etc/systemd/system/shutdown-shim.service.d/50-system-test.conf",
          f"# The system test's watchdog case: a shorter WatchdogSec= than the shipped 30 s.\n"
          f"[Service]\nWatchdogSec={WATCHDOG_S}s\n")


def kubelet_lock(root: Path):
    write(root / "etc/system-test/kubelet.env", f"KUBELET_SHUTDOWN_GRACE={KUBELET_GRACE_S}\n")
    run(["systemctl", f"--root={root}", "enable", "kubelet.service"])


def reboot_checks(node: Node, r: Result, trigger_us, full_hold=True, resumed=False):
    """What a reboot through logind must show once the container is gone. Times count from
    logind's "The system will reboot now!" (it accepted the Reboot call); returns the journal and
    that moment."""
    j = Journal(node.root)
    accepted_t, _ = j.first(from_logind("The system will reboot now"), trigger_us)
    r.expect(accepted_t is not None, "logind never logged 'The system will reboot now!'")
    t0 = accepted_t or trigger_us
    events = node.events()
    times = lambda kind: [e["monotonic_us"] for e in events if e["event"] == kind]
    initiated = [t for t in times("ShutdownInitiated") if t > trigger_us]
    forwarded = times("SignalForwarded")
    drained = times("DrainElapsed")
    released = [t for t in times("InhibitorReleased") if initiated and t > initiated[0]]
    signals = node.apiserver_signals()
    rebooting_t, _ = j.first(from_logind("System is rebooting"), trigger_us)
    timeout_t, _ = j.first(from_logind("inhibitor timeout is reached"), trigger_us)
    stops = j.all(from_pid1("Stopping "), trigger_us)
    # The last: a restart (kill-hold) stops the unit once before the shutdown does.
    shim_stopped = j.all(from_pid1("Stopped shutdown-shim.service"), trigger_us)
    shim_stopped_t = shim_stopped[-1][0] if shim_stopped else None
    runtime_stopping_t, _ = j.first(from_pid1("Stopping containerd.service"), trigger_us)
    scope_t, scope_msg = j.first(runtime_stop, trigger_us)
    unready_t, _ = j.first(lambda e: e["MESSAGE"].startswith("vm-test: readyz ")
                           and not e["MESSAGE"].endswith(" 200"), trigger_us)
    stop_timeouts = j.all(lambda e: e.get("_PID") == "1" and "timed out" in e["MESSAGE"])
    initiated_t = initiated[0] if initiated else None
    released_t = released[-1] if released else None
    drained_t = drained[0] if drained else None

    r.expect(node.nspawn.returncode == 133,
             f"systemd-nspawn exited with {node.nspawn.returncode}, not 133 (a reboot)")
    r.expect(initiated_t is not None, "no ShutdownInitiated after the reboot was asked for")
    r.expect(len(forwarded) == 1, f"{len(forwarded)} SignalForwarded events, expected 1")
    r.expect(len(signals) == 1, f"kube-apiserver got {len(signals)} SIGTERMs, expected 1")
    r.expect(rebooting_t is not None, "logind never logged 'System is rebooting'")
    r.expect(unready_t is not None and rebooting_t is not None and unready_t < rebooting_t,
             "the /readyz watcher never saw the shim unready before the reboot went on")
    for _, message in stop_timeouts:
        r.expect(False, f"a unit hit its stop timeout: {message}")
    if full_hold:
        r.expect(timeout_t is None, "logind cut the hold short ('inhibitor timeout is reached')")
        r.expect(drained_t is not None, "no DrainElapsed")
        r.expect(released_t is not None, "the lock was never released after the shutdown began")
        if None not in (initiated_t, drained_t, released_t, rebooting_t):
            r.expect(drained_t <= released_t <= rebooting_t,
                     "order: expected DrainElapsed <= InhibitorReleased <= 'System is rebooting'")
            r.expect(rebooting_t - initiated_t >= DRAIN_S * US,
                     "the reboot went on before the drain had passed")
            r.expect(not stops or stops[0][0] >= released_t,
                     "PID 1 began stopping units before the shim released its lock")
    if None not in (shim_stopped_t, runtime_stopping_t):
        r.expect(runtime_stopping_t >= shim_stopped_t,
                 "the container runtime began stopping before the shim had stopped (After=)")
    if resumed:
        r.expect(times("ShutdownResumed"), "no ShutdownResumed event from the restarted shim")

    r.facts.update({
        "logind accepted (after the host's call)": ms(accepted_t, trigger_us),
        "ShutdownInitiated": ms(initiated_t, t0),
        "unready (readyz watcher)": ms(unready_t, t0),
        "SIGTERMs at kube-apiserver": f"{len(signals)} at "
                                      + ", ".join(ms(t, t0) for t in signals),
        "SignalForwarded events": str(len(forwarded)),
        "DrainElapsed": ms(drained_t, t0),
        "lock released": ms(released_t, t0),
        "logind timeout message": ms(timeout_t, t0) if timeout_t else "no",
        "System is rebooting": ms(rebooting_t, t0),
        "hold (initiated -> rebooting)": ms(rebooting_t, initiated_t),
        "first PID 1 'Stopping'": ms(stops[0][0], t0) if stops else "-",
        "shim stopped / runtime stopping": f"{ms(shim_stopped_t, t0)} / "
                                           f"{ms(runtime_stopping_t, t0)}",
        "runtime at its stop": f"{ms(scope_t, t0)} {scope_msg or ''}".strip(),
        "stop timeouts": str(len(stop_timeouts)),
    })
    return j, t0


def reboot(node: Node, r: Result):
    node.start()
    node.wait_ready()
    r.facts["logind InhibitDelayMaxSec"] = f"{node.logind_delay_us() / US:g} s"
    r.expect(node.logind_delay_us() == 150 * US,
             "logind does not apply the shipped drop-in's 150 s")
    first_boot_id = node.sh("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
    shim_boot_id = next((e.get("boot_id") for e in node.events() if e["event"] == "Started"), None)
    trigger = now_us()
    node.sh("systemctl", "reboot")
    node.wait_exit(120)
    reboot_checks(node, r, trigger)
    # The load balancer's figures of new connections come from the kernel's socket table
    # (NETLINK_SOCK_DIAG): the unit must let the shim open that socket.
    drained = [e for e in node.events() if e["event"] == "DrainElapsed"]
    samples = drained[-1].get("lb_connection_samples") if drained else None
    r.expect(samples not in (None, "0"), "the DrainElapsed event has no sample of new "
             f"connections (lb_connection_samples={samples}): the socket table was not read")
    r.facts["samples of new connections"] = str(samples)
    # The next boot, on the same root: `shutdown-shim report` says the last shutdown was clean.
    # nspawn gives each boot of the container a boot id of its own, but the shim's unit sees the
    # host's (its sandbox drops nspawn's mount over /proc/sys/kernel/random/boot_id: measured
    # here, the fact below), so both boots are one to the shim and PreviousShutdown, which looks
    # at earlier boots only, is not asserted here (ShimReport does, with a boot id of its own).
    if node.console:
        node.console.close()
    first_boot_events = len(node.events())
    node.start()
    node.wait_ready(after_event=first_boot_events)
    r.facts["boot ids: container, shim, container's next"] = " ".join(
        [first_boot_id, str(shim_boot_id),
         node.sh("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()])
    report = node.sh("shutdown-shim", "report", "--event-log=/var/log/shutdown-shim/events.jsonl",
                     check=False)
    r.expect(report.returncode == 0 and "clean" in report.stdout,
             f"shutdown-shim report on the next boot exited {report.returncode}: "
             f"{report.stdout}{report.stderr}")
    lines = report.stdout.strip().splitlines()
    r.facts["report on the next boot"] = lines[-1] if lines else "(nothing)"
    node.power_off_now()


def ensure(node: Node, r: Result):
    node.start()
    ready = node.wait_ready()
    ensured = [e for e in node.events() if e["event"] == "InhibitDelayEnsured"]
    needed = EXIT_TIMEOUT_S + DRAIN_S + 5  # the hold plus the margin (10 %, at least 5 s)
    delay = node.logind_delay_us()
    dropin = node.root / "etc/systemd/logind.conf.d/zz-shutdown-shim.conf"
    r.expect(ensured and ensured[0].get("old_usec") == str(5 * US),
             f"no InhibitDelayEnsured raising logind from its 5 s default: {ensured}")
    r.expect(delay == needed * US, f"logind's InhibitDelayMaxUSec is {delay}, not {needed} s")
    r.expect(dropin.exists() and f"InhibitDelayMaxSec={needed}\n" in dropin.read_text(),
             f"the shim did not write {dropin.name} with {needed} under /etc (ReadWritePaths=)")
    trigger = now_us()
    node.sh("systemctl", "reboot")
    node.wait_exit(120)
    j, _ = reboot_checks(node, r, trigger)
    wrote_t, reloaded_t = logind_reload(j, r)
    r.facts = {"logind InhibitDelayMaxSec": f"5 s -> {delay / US:g} s",
               "drop-in written -> logind reloaded": ms(reloaded_t, wrote_t),
               "ready after boot": ms(ready, node.booted_us), **r.facts}


def logind_reload(j: Journal, r: Result):
    """When the shim wrote its drop-in, and when logind (SIGHUP from PID 1's KillUnit) read it."""
    wrote_t, _ = j.first(lambda e: e.get("SYSLOG_IDENTIFIER") == "shutdown-shim"
                         and "wrote a logind drop-in" in e["MESSAGE"])
    reloaded_t, _ = j.first(from_logind("Config file reloaded"), wrote_t or 0)
    r.expect(wrote_t is not None and reloaded_t is not None,
             "no 'Config file reloaded' from logind after the shim wrote its drop-in (KillUnit)")
    return wrote_t, reloaded_t


def kubelet_grace(node: Node, r: Result):
    node.start()
    node.wait_ready()
    delay = node.logind_delay_us()
    ensured = [e for e in node.events() if e["event"] == "InhibitDelayEnsured"]
    dropin = node.root / "etc/systemd/logind.conf.d/zz-shutdown-shim.conf"
    r.expect(delay == KUBELET_DROPIN_S * US,
             f"logind's InhibitDelayMaxUSec is {delay / US:g} s: the shim's vendor drop-in "
             f"(150 s, sorting after 99-kubelet.conf) cuts kubelet's {KUBELET_DROPIN_S} s")
    r.expect(dropin.exists() and f"InhibitDelayMaxSec={KUBELET_DROPIN_S}\n" in dropin.read_text(),
             f"no /etc/systemd/logind.conf.d/{dropin.name} with kubelet's {KUBELET_DROPIN_S} s")
    r.expect(ensured, "no InhibitDelayEnsured event")
    wrote_t, reloaded_t = logind_reload(Journal(node.root), r)
    r.facts.update({
        "logind InhibitDelayMaxSec": f"{delay / US:g} s",
        "InhibitDelayEnsured": (f"{int(ensured[0]['old_usec']) / US:g} s -> "
                                f"{int(ensured[0]['new_usec']) / US:g} s") if ensured else "-",
        "drop-in written -> logind reloaded": ms(reloaded_t, wrote_t),
    })
    node.power_off_now()


def lifecycle(node: Node, r: Result):
    node.start()
    ready = node.wait_ready()
    r.facts["ready after boot"] = ms(ready, node.booted_us)

    # The sandbox: the shim runs with the shipped hardening and still finds kube-apiserver in
    # /proc (no ProtectProc=), writes its event log (LogsDirectory=) and keeps its record
    # (RuntimeDirectory=).
    security = node.sh("systemd-analyze", "security", "--no-pager", "shutdown-shim.service").stdout
    match = re.search(r"Overall exposure level for shutdown-shim\.service: ([0-9.]+)", security)
    exposure = float(match.group(1)) if match else None
    r.expect(exposure is not None and exposure <= SECURITY_EXPOSURE_MAX,
             f"systemd-analyze security: exposure {exposure}, above {SECURITY_EXPOSURE_MAX}")
    r.facts["systemd-analyze security"] = str(exposure)
    verbose = run(["nsenter", f"--target={node.pid1}", "--net", "--", "curl", "-s",
                   "http://127.0.0.1:6080/readyz?verbose"], check=False).stdout
    r.expect("[+]inhibitor ok" in verbose, f"/readyz?verbose: {verbose!r}")
    # What PID 1 applied: the bounding set, no_new_privs, the seccomp filter, a read-only root
    # (ProtectSystem=strict) with /etc/systemd/logind.conf.d writable (ReadWritePaths=).
    main_pid = node.unit("MainPID")
    status = dict(line.split(":", 1) for line in
                  node.sh("cat", f"/proc/{main_pid}/status").stdout.splitlines() if ":" in line)
    mounts = node.sh("cat", f"/proc/{main_pid}/mountinfo").stdout
    mount_options = {m.split()[4]: m.split()[5] for m in mounts.splitlines()}
    r.expect(int(status["CapBnd"], 16) == CAP_KILL | CAP_SYS_BOOT,
             f"bounding set {status['CapBnd'].strip()}, not CAP_KILL + CAP_SYS_BOOT")
    r.expect(status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2",
             "no no_new_privs or no seccomp filter on the shim")
    r.expect(mount_options.get("/", "").startswith("ro"), "/ is not read-only for the shim")
    r.expect(mount_options.get("/etc/systemd/logind.conf.d", "").startswith("rw"),
             "/etc/systemd/logind.conf.d is not writable for the shim")
    r.facts["the shim's sandbox"] = (f"CapBnd {status['CapBnd'].strip()}, NoNewPrivs "
                                     f"{status['NoNewPrivs'].strip()}, Seccomp "
                                     f"{status['Seccomp'].strip()}, / {mount_options.get('/')}")

    # systemctl restart while idle: no signal, the lock taken again, ready again.
    pid_before = node.unit("MainPID")
    events_before = len(node.events())
    t0 = now_us()
    node.sh("systemctl", "restart", "shutdown-shim.service", timeout=120)
    t1 = now_us()
    ready_again = node.wait_ready(after_event=events_before)
    pid_after = node.unit("MainPID")
    after = node.events()[events_before:]
    kinds = [e["event"] for e in after]
    r.expect(pid_after != pid_before, "systemctl restart left the same MainPID")
    r.expect("SignalForwarded" not in kinds, f"a signal was forwarded at an idle restart: {kinds}")
    r.expect(not node.apiserver_signals(), "kube-apiserver got a signal at an idle restart")
    r.expect("shutdown-shim" in node.inhibitors() and pid_after in node.inhibitors(),
             f"logind does not list the new shim's lock:\n{node.inhibitors()}")
    r.facts.update({"restart: systemctl returned": ms(t1, t0),
                    "restart: ready again": ms(ready_again, t0),
                    "restart: events": " ".join(kinds)})

    # The watchdog: a stopped shim is killed and restarted by systemd after WatchdogSec=.
    restarts = int(node.unit("NRestarts"))
    events_before = len(node.events())
    stopped_pid = node.unit("MainPID")
    t_stop = now_us()
    node.sh("systemctl", "kill", "--kill-who=main", "--signal=SIGSTOP", "shutdown-shim.service")
    node.wait_for(lambda: node.unit("NRestarts") != str(restarts), 60 + WATCHDOG_S,
                  "systemd to restart the stopped shim")
    ready_again = node.wait_ready(after_event=events_before)
    j = Journal(node.root)
    watchdog_t, watchdog_msg = j.first(lambda e: "Watchdog timeout" in e["MESSAGE"], t_stop)
    restart_t, _ = j.first(lambda e: e.get("_PID") == "1" and "Scheduled restart job"
                           in e["MESSAGE"], t_stop)
    kinds = [e["event"] for e in node.events()[events_before:]]
    r.expect(watchdog_t is not None, "PID 1 never logged a watchdog timeout")
    r.expect(node.unit("MainPID") != stopped_pid, "the stopped shim is still the main process")
    r.expect("SignalForwarded" not in kinds, "a signal was forwarded at the watchdog restart")
    r.expect(not node.apiserver_signals(), "kube-apiserver got a signal at the watchdog restart")
    r.facts.update({"watchdog: PID 1's timeout": f"{ms(watchdog_t, t_stop)} ({watchdog_msg})",
                    "watchdog: restart scheduled": ms(restart_t, t_stop),
                    "watchdog: ready again": ms(ready_again, t_stop),
                    "watchdog: NRestarts": node.unit("NRestarts")})
    node.power_off_now()


def kill_hold(node: Node, r: Result):
    node.start()
    node.wait_ready()
    r.expect("kubelet" in node.inhibitors(), "the stand-in kubelet holds no delay lock")
    trigger = now_us()
    node.sh("systemctl", "reboot")
    node.wait_for(lambda: any(e["event"] == "SignalForwarded" for e in node.events()), 30,
                  "SignalForwarded")
    killed = now_us()
    node.sh("systemctl", "kill", "--signal=SIGKILL", "shutdown-shim.service")
    node.wait_exit(120)
    j, t0 = reboot_checks(node, r, trigger, full_hold=False, resumed=True)
    restart_t, _ = j.first(lambda e: e.get("_PID") == "1" and "Scheduled restart job"
                           in e["MESSAGE"], killed)
    resumed_t, _ = j.first(lambda e: e.get("SYSLOG_IDENTIFIER") == "shutdown-shim"
                           and e["MESSAGE"].startswith("resuming the hold"), killed)
    kubelet_t, _ = j.first(lambda e: e["MESSAGE"] == "kubelet stand-in: releasing the delay lock")
    rebooting_t, _ = j.first(from_logind("System is rebooting"), trigger)
    r.expect(restart_t is not None, "PID 1 never scheduled the restart (Restart=on-failure)")
    r.expect(rebooting_t is None or kubelet_t is None or rebooting_t >= kubelet_t,
             "the reboot went on before the other delay lock was released")
    r.facts.update({"SIGKILL": ms(killed, t0), "restart scheduled": ms(restart_t, t0),
                    "ShutdownResumed (journal)": ms(resumed_t, t0),
                    "kubelet's lock released": ms(kubelet_t, t0)})


SLOW_STOP_S = 30  # the cancel case's unit that holds the shutdown's stop jobs back


def slow_stop_unit(root: Path):
    # Stopped before the shim (After=, reversed at a stop), its stop taking SLOW_STOP_S: the
    # shutdown's jobs stay queued long enough for an operator's `systemctl cancel`.
    write(root / "etc/systemd/system/slow-stop.service",
          "[Unit]\nDescription=system test: a unit that takes long to stop\n"
          "After=shutdown-shim.service\n"
          f"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n"
          f"ExecStop=/bin/sleep {SLOW_STOP_S}\nTimeoutStopSec={SLOW_STOP_S * 2}\n"
          "[Install]\nWantedBy=multi-user.target\n")
    run(["systemctl", f"--root={root}", "enable", "slow-stop.service"])


def cancel(node: Node, r: Result):
    """systemctl reboot, the hold served, then `systemctl cancel` while the stop jobs wait on a
    slow unit: logind's PrepareForShutdown(false) reaches the shim, which takes its lock again and
    signals nothing more; once the runtime runs kube-apiserver again it is ready."""
    node.start()
    node.wait_ready()
    pid = node.unit("MainPID")
    trigger = now_us()
    node.sh("systemctl", "reboot")
    node.wait_for(lambda: any(e["event"] == "InhibitorReleased" and e["monotonic_us"] > trigger
                              for e in node.events()), 60, "the shim's release of its lock")
    node.wait_for(lambda: node.unit("ActiveState", "slow-stop.service") == "deactivating"
                  and "reboot.target" in node.sh("systemctl", "list-jobs", "--no-legend",
                                                 check=False).stdout, 30,
                  "reboot.target's job queued behind the slow unit's stop")
    cancelled = now_us()
    events_before = len(node.events())
    node.sh("systemctl", "cancel")
    node.wait_for(lambda: any(e["event"] == "InhibitorTaken" and e["monotonic_us"] > cancelled
                              for e in node.events()), 30, "the shim's lock taken again")
    events = node.events()
    times = lambda kind: [e["monotonic_us"] for e in events if e["event"] == kind]
    cancel_t = next((t for t in times("ShutdownCancelled") if t > cancelled), None)
    retaken_t = next((t for t in times("InhibitorTaken") if t > cancelled), None)
    r.expect(cancel_t is not None, "no ShutdownCancelled after the cancel")
    r.expect(node.nspawn.poll() is None, "the node went down after all")
    r.expect(node.unit("MainPID") == pid, f"the shim was stopped or restarted: MainPID {pid} -> "
             f"{node.unit('MainPID')}")
    r.expect(("shutdown-shim", pid) in node.delay_locks(),
             f"logind lists no delay lock of the shim: {node.delay_locks()}")
    # kubelet would start kube-apiserver again; here its runtime does.
    node.sh("systemctl", "restart", "containerd.service")
    ready_t = node.wait_ready(after_event=events_before)
    signals = node.apiserver_signals()
    r.expect(len(signals) == 1, f"kube-apiserver got {len(signals)} SIGTERMs, expected 1")
    j = node.journal()
    accepted_t, _ = j.first(from_logind("The system will reboot now"), trigger)
    r.facts.update({
        "SIGTERMs at kube-apiserver": f"{len(signals)} at "
                                      + ", ".join(ms(t, accepted_t or trigger) for t in signals),
        "lock released": ms(next((t for t in times("InhibitorReleased") if t > trigger), None),
                            accepted_t or trigger),
        "ShutdownCancelled (after the cancel)": ms(cancel_t, cancelled),
        "lock taken again": ms(retaken_t, cancelled),
        "ready again (runtime restarted)": ms(ready_t, cancelled),
    })
    node.power_off_now()


def ordering(node: Node, r: Result):
    node.start()
    node.wait_ready()
    # What logind itself asks PID 1 for, without the delay lock: the shim learns of the
    # shutdown only from its own stop, and After=containerd.service must hold the runtime back.
    trigger = now_us()
    node.sh("systemctl", "start", "--no-block", "--job-mode=replace-irreversibly", "reboot.target")
    node.wait_exit(120)
    j = Journal(node.root)
    events = node.events()
    initiated = [e for e in events if e["event"] == "ShutdownInitiated"]
    drained = [e["monotonic_us"] for e in events if e["event"] == "DrainElapsed"]
    forwarded = [e for e in events if e["event"] == "SignalForwarded"]
    signals = node.apiserver_signals()
    shim_stopping_t, _ = j.first(from_pid1("Stopping shutdown-shim.service"), trigger)
    shim_stopped_t, _ = j.first(from_pid1("Stopped shutdown-shim.service"), trigger)
    runtime_stopping_t, _ = j.first(from_pid1("Stopping containerd.service"), trigger)
    scope_t, scope_msg = j.first(runtime_stop, trigger)
    stop_timeouts = j.all(lambda e: e.get("_PID") == "1" and "timed out" in e["MESSAGE"])
    r.expect(node.nspawn.returncode == 133, f"systemd-nspawn exited {node.nspawn.returncode}")
    r.expect(initiated and initiated[0].get("cause") == "SIGTERM",
             f"the shim's shutdown did not start from its SIGTERM: {initiated}")
    r.expect(len(forwarded) == 1 and len(signals) == 1,
             f"{len(forwarded)} SignalForwarded, {len(signals)} SIGTERMs at kube-apiserver")
    r.expect(drained, "no DrainElapsed: the shim did not drain at its stop")
    r.expect(None not in (shim_stopped_t, runtime_stopping_t)
             and runtime_stopping_t >= shim_stopped_t,
             "the runtime began stopping before the shim had stopped")
    r.expect(drained and runtime_stopping_t is not None and runtime_stopping_t >= drained[0],
             "the runtime began stopping before the drain had passed")
    for _, message in stop_timeouts:
        r.expect(False, f"a unit hit its stop timeout: {message}")
    r.facts.update({
        "shim Stopping": ms(shim_stopping_t, trigger),
        "SIGTERMs at kube-apiserver": f"{len(signals)} at "
                                      + ", ".join(ms(t, trigger) for t in signals),
        "DrainElapsed": ms(drained[0] if drained else None, trigger),
        "shim Stopped": ms(shim_stopped_t, trigger),
        "runtime Stopping": ms(runtime_stopping_t, trigger),
        "runtime at its stop": f"{ms(scope_t, trigger)} {scope_msg or ''}".strip(),
        "stop timeouts": str(len(stop_timeouts)),
    })


def package_deb(node: Node):
    """The .deb in the bare node's PACKAGE_DIR (the one file prepare_bare_layer put there)."""
    debs = sorted((node.root / PACKAGE_DIR.relative_to("/")).glob("shutdown-shim_*.deb"))
    if len(debs) != 1:
        raise RuntimeError(f"{PACKAGE_DIR} holds {[d.name for d in debs]}, not one .deb")
    return str(PACKAGE_DIR / debs[0].name)


def shim_locks(node: Node):
    """The PIDs of the shim's delay locks that logind lists."""
    return [pid for who, pid in node.delay_locks() if who == "shutdown-shim"]


def install(node: Node, r: Result):
    """apt-get install on a booted node that has never had the package: the package enables and
    starts its unit and reloads logind itself, the operator does nothing else."""
    node.start()
    node.wait_for(node.apiserver_pid, 30, "kube-apiserver running")
    listed = node.sh("systemctl", "list-unit-files", "--no-legend", "shutdown-shim.service",
                     check=False).stdout.strip()
    delay_before = node.logind_delay_us()
    r.expect(not listed, f"the bare node already knows the unit: {listed}")
    # logind's built-in 5 s: nothing on the bare node configures it, so 150 s afterwards is the
    # package's drop-in, read at the postinst's SIGHUP.
    r.expect(delay_before == 5 * US, f"logind on the bare node: {delay_before / US:g} s, not 5 s")
    events_before = len(node.events())
    t0 = now_us()
    node.apt("install", package_deb(node), log="apt.log")
    t1 = now_us()
    j = node.journal()
    main_pid = node.unit("MainPID")
    comm = node.sh("cat", f"/proc/{main_pid}/comm", check=False).stdout.strip()
    enabled = node.sh("systemctl", "is-enabled", "shutdown-shim.service", check=False).stdout
    started_t, _ = j.first(from_pid1("Started shutdown-shim.service"), t0)
    reloaded_t, _ = j.first(from_logind("Config file reloaded"), t0)
    taken = [e for e in node.events()[events_before:] if e["event"] == "InhibitorTaken"]
    shim_started = [e["monotonic_us"] for e in node.events()[events_before:]
                    if e["event"] == "Started"]
    r.expect(enabled.strip() == "enabled", f"systemctl is-enabled: {enabled.strip()!r}")
    r.expect(node.unit("ActiveState") == "active" and comm == "shutdown-shim",
             f"the unit is {node.unit('ActiveState')}, its MainPID {main_pid} is {comm!r}")
    # deb-systemd-invoke start waits for the start job, and Type=notify ends that job only at
    # READY=1: when apt-get returns, the shim has its lock.
    r.expect(started_t is not None and started_t <= t1,
             "PID 1 logged no 'Started shutdown-shim.service' before apt-get returned")
    r.expect(taken, "no InhibitorTaken from the shim the package started")
    r.expect(shim_locks(node) == [main_pid],
             f"logind's delay locks {node.delay_locks()}, not the shim's (PID {main_pid})")
    delay = node.logind_delay_us()
    shim_dropin = node.root / "etc/systemd/logind.conf.d/zz-shutdown-shim.conf"
    r.expect(delay == 150 * US, f"logind's InhibitDelayMaxUSec is {delay / US:g} s, not 150 s")
    r.expect(reloaded_t is not None and reloaded_t <= t1,
             "logind logged no 'Config file reloaded' during apt-get install (postinst's SIGHUP)")
    # Had logind not reloaded before the shim's start, the shim would have found 5 s and written
    # a drop-in of its own (with its 149 s for the default 70 s + 65 s).
    r.expect(not shim_dropin.exists(), f"the shim wrote {shim_dropin.name}: logind had not "
             "reloaded the package's 150 s when it started")
    # The package's defaults: the upstream check wants kubeadm's CA (not on this node) and keeps
    # /readyz at 503; every other check passes.
    node.wait_for(lambda: node.curl("/readyz?exclude=upstream") == "200", 30,
                  "/readyz?exclude=upstream answering 200")
    code = node.curl()
    verbose = run(["nsenter", f"--target={node.pid1}", "--net", "--", "curl", "-s",
                   "http://127.0.0.1:6080/readyz?verbose"], check=False).stdout
    r.expect(code == "503" and "[+]inhibitor ok" in verbose and "[-]upstream failed" in verbose,
             f"/readyz {code}, verbose {verbose!r}")
    r.expect(not node.apiserver_signals(), "kube-apiserver got a signal at the install")
    r.facts.update({
        "apt-get install": ms(t1, t0),
        "logind reloaded / shim Started (PID 1)": f"{ms(reloaded_t, t0)} / {ms(started_t, t0)}",
        "shim's Started event": ms(shim_started[0] if shim_started else None, t0),
        "logind InhibitDelayMaxSec": f"{delay_before / US:g} s -> {delay / US:g} s",
        "is-enabled, MainPID": f"{enabled.strip()}, {main_pid} ({comm})",
        "/readyz, ?exclude=upstream": f"{code}, {node.curl('/readyz?exclude=upstream')}",
    })
    node.power_off_now()


def upgrade(node: Node, r: Result):
    """An upgrade (apt-get install --reinstall of the same version runs the same maintainer
    scripts: prerm upgrade, postinst configure with the old version) restarts the shim and never
    signals kube-apiserver."""
    node.start()
    node.wait_ready()
    pid_before = node.unit("MainPID")
    invocation_before = node.unit("InvocationID")
    apiserver_before = node.apiserver_pid()
    events_before = len(node.events())
    r.expect(shim_locks(node) == [pid_before], f"logind's delay locks: {node.delay_locks()}")
    t0 = now_us()
    node.apt("install", "--reinstall", package_deb(node), log="apt.log")
    t1 = now_us()
    # deb-systemd-invoke restart returns once the new start job is done (Type=notify: READY=1),
    # so a restart shows at once; without one, waiting for a new run would only time out.
    pid_after = node.unit("MainPID")
    restarted = r.expect(pid_after != pid_before, f"MainPID {pid_before} still runs after "
                                                  "apt-get: the upgrade did not restart the shim")
    ready_again = node.wait_ready(after_event=events_before) if restarted else None
    j = node.journal()
    after = node.events()[events_before:]
    kinds = [e["event"] for e in after]
    old_run = [e for e in after if str(e.get("pid")) == pid_before]
    new_run = [e["event"] for e in after if str(e.get("pid")) == pid_after]
    stopping_t, _ = j.first(from_pid1("Stopping shutdown-shim.service"), t0)
    started_t, _ = j.first(from_pid1("Started shutdown-shim.service"), t0)
    readyz = [(t, m.split()[-1]) for t, m in
              j.all(lambda e: e["MESSAGE"].startswith("vm-test: readyz "), t0)]
    lifecycle = node.apiserver_lifecycle()
    # The restart: PID 1 stopped and started the unit inside apt-get's run, with a new
    # invocation, a new main process (the old one gone) and a new Started event in the log.
    r.expect(None not in (stopping_t, started_t) and t0 <= stopping_t <= started_t <= t1,
             "PID 1 did not stop and start shutdown-shim.service during apt-get")
    r.expect(not node.alive(pid_before), f"the old shim (PID {pid_before}) still runs")
    r.expect(node.unit("InvocationID") != invocation_before, "the same invocation of the unit")
    r.expect(new_run[:1] == ["Started"] and "InhibitorTaken" in new_run,
             f"the new run's events: {new_run}")
    # The old run's last word: its SIGTERM came from the restart, not from a stopping PID 1.
    r.expect(any(e["event"] == "InhibitorReleased" and "without signalling" in e["message"]
                 for e in old_run),
             f"the old run did not say it stopped without signalling: {old_run}")
    r.expect(shim_locks(node) == [pid_after],
             f"logind's delay locks after the upgrade {node.delay_locks()}, not the new shim's "
             f"(PID {pid_after}) alone")
    # kube-apiserver all along: the same process, alive, its lifecycle log only its start-up (it
    # logs UNREADY when a signal starts its shutdown, EXIT when it exits), no signal logged.
    r.expect(node.apiserver_pid() == apiserver_before and node.alive(apiserver_before),
             f"kube-apiserver's PID {apiserver_before} -> {node.apiserver_pid()}")
    r.expect(lifecycle == APISERVER_RUNNING, f"kube-apiserver's lifecycle log: {lifecycle}")
    r.expect(not node.apiserver_signals(),
             f"kube-apiserver got {len(node.apiserver_signals())} signals at the upgrade")
    # Any SIGTERM turns the shim unready and makes it ask PID 1; PID 1 said "running", so nothing
    # was forwarded, and the stop is a Restart, no shutdown (issue 22).
    r.expect("SignalForwarded" not in kinds, f"a signal was forwarded at the upgrade: {kinds}")
    r.expect("Restart" in kinds and "ShutdownInitiated" not in kinds,
             f"the upgrade's restart is not recorded as a Restart: {kinds}")
    # The daemon under the real systemd and journald: the restart is a structured entry.
    restart_t, _ = j.first(lambda e: e.get("MESSAGE_ID") == message_id("Restart") and
                           e.get("SHUTDOWN_SHIM_EVENT") == "Restart", t0)
    r.expect(restart_t is not None, "no journal entry MESSAGE_ID=<Restart's id> at the upgrade")
    # The operator's settings survive: an unchanged conffile the operator edited is kept.
    r.expect(SETTINGS_MARK in (node.root / "etc/default/shutdown-shim").read_text(),
             "the upgrade replaced the edited /etc/default/shutdown-shim")
    r.facts.update({
        "apt-get install --reinstall": ms(t1, t0),
        "PID 1 Stopping / Started": f"{ms(stopping_t, t0)} / {ms(started_t, t0)}",
        "MainPID": f"{pid_before} -> {pid_after}",
        "ready again (200, lock)": ms(ready_again, t0),
        "readyz watcher": " ".join(f"{code}@{ms(t, t0)}" for t, code in readyz) or "no change",
        "kube-apiserver": f"PID {apiserver_before}, lifecycle {' '.join(lifecycle)}, "
                          f"{len(node.apiserver_signals())} signals",
        "old run's last events": "; ".join(f"{e['event']}: {e['message']}" for e in old_run),
        "new run's events": " ".join(new_run),
    })
    node.power_off_now()


def operator_dropin(root: Path):
    # logind at its built-in 5 s (as in ensure), so that the shim writes its drop-in; and a
    # drop-in of the operator's own in the same directory, which purge must leave alone.
    no_vendor_dropin(root)
    write(root / "etc/systemd/logind.conf.d/10-operator.conf",
          "# The operator's own logind setting\n[Login]\nHandlePowerKey=ignore\n")


def purge(node: Node, r: Result):
    """apt-get remove, then purge, on a running node: remove stops the shim (no signal to
    kube-apiserver) and keeps its conffile; purge takes the conffile and what the shim wrote
    (its logind drop-in) and keeps the event log."""
    node.start()
    node.wait_ready()
    etc = node.root / "etc"
    shim_dropin = etc / "systemd/logind.conf.d/zz-shutdown-shim.conf"
    event_log = node.root / "var/log/shutdown-shim/events.jsonl"
    needed = EXIT_TIMEOUT_S + DRAIN_S + 5
    r.expect(shim_dropin.exists() and node.logind_delay_us() == needed * US,
             f"the shim did not raise logind to {needed} s with its drop-in")
    r.expect(event_log.exists() and event_log.stat().st_size > 0, "no event log")
    main_pid = node.unit("MainPID")
    apiserver = node.apiserver_pid()

    t0 = now_us()
    node.apt("remove", "shutdown-shim", log="apt.log")
    t1 = now_us()
    j = node.journal()
    stopped_t, _ = j.first(from_pid1("Stopped shutdown-shim.service"), t0)
    removed = node.sh("dpkg-query", "-W", "-f=${db:Status-Abbrev}", "shutdown-shim",
                      check=False).stdout.strip()
    conffile = etc / "default/shutdown-shim"
    r.expect(stopped_t is not None and stopped_t <= t1,
             "PID 1 logged no 'Stopped shutdown-shim.service' during apt-get remove")
    r.expect(not node.alive(main_pid), f"the shim (PID {main_pid}) still runs after remove")
    r.expect(node.unit("ActiveState") == "inactive",
             f"the unit is {node.unit('ActiveState')} after remove")
    r.expect(not shim_locks(node), f"logind still lists the shim's lock: {node.delay_locks()}")
    r.expect(removed == "rc", f"dpkg's state after remove: {removed!r}, not rc (config-files)")
    r.expect(conffile.exists() and SETTINGS_MARK in conffile.read_text(),
             "remove did not keep /etc/default/shutdown-shim with the operator's settings")
    r.expect(shim_dropin.exists(), "remove took the shim's logind drop-in (purge's job)")
    r.expect(not (node.root / "usr/bin/shutdown-shim").exists()
             and not (node.root / "lib/systemd/system/shutdown-shim.service").exists(),
             "remove left the binary or the unit file")
    signals_at_remove = len(node.apiserver_signals())

    t2 = now_us()
    node.apt("purge", "shutdown-shim", log="apt.log")
    t3 = now_us()
    j = node.journal()
    reloaded = j.all(from_logind("Config file reloaded"), t2)
    enabled = node.sh("systemctl", "is-enabled", "shutdown-shim.service", check=False)
    listed = node.sh("systemctl", "list-unit-files", "--no-legend", "shutdown-shim.service",
                     check=False).stdout.strip()
    wants = etc / "systemd/system/multi-user.target.wants/shutdown-shim.service"
    # dpkg forgets a purged package: "no packages found" (exit 1), or "un" while apt's
    # bookkeeping still names it.
    known = node.sh("dpkg-query", "-W", "-f=${db:Status-Abbrev}", "shutdown-shim", check=False)
    status = known.stdout.strip() if known.returncode == 0 else "unknown to dpkg"
    delay = node.logind_delay_us()
    r.expect(not conffile.exists(), "purge left /etc/default/shutdown-shim")
    r.expect(not shim_dropin.exists(), f"purge left the shim's {shim_dropin.name}")
    r.expect((etc / "systemd/logind.conf.d/10-operator.conf").exists(),
             "purge took the operator's own logind drop-in")
    r.expect(event_log.exists() and event_log.stat().st_size > 0,
             "purge took /var/log/shutdown-shim/events.jsonl")
    r.expect(not (node.root / "run/shutdown-shim").exists(), "purge left /run/shutdown-shim")
    r.expect(enabled.returncode != 0 and "enabled" not in enabled.stdout.split(),
             f"systemctl is-enabled after purge: {enabled.returncode} {enabled.stdout.strip()!r}")
    r.expect(not listed and not os.path.lexists(wants),
             f"systemctl still knows the unit ({listed!r}) or its wants link is left")
    r.expect(status in ("unknown to dpkg", "un"), f"dpkg's state after purge: {status!r}")
    # postrm's SIGHUP: logind drops the shim's 32 s and is back at its built-in 5 s.
    r.expect(reloaded and delay == 5 * US,
             f"logind after purge: {delay / US:g} s, {len(reloaded)} reloads (expected 5 s)")
    r.expect(node.alive(apiserver) and node.apiserver_lifecycle() == APISERVER_RUNNING,
             f"kube-apiserver did not run through: {node.apiserver_lifecycle()}")
    r.expect(not node.apiserver_signals(),
             f"kube-apiserver got {len(node.apiserver_signals())} signals (remove: "
             f"{signals_at_remove})")
    r.facts.update({
        "apt-get remove": ms(t1, t0),
        "shim Stopped (PID 1)": ms(stopped_t, t0),
        "apt-get purge": ms(t3, t2),
        "logind after purge": f"{delay / US:g} s ({len(reloaded)} reload)",
        "dpkg after remove / purge": f"{removed} / {status}",
        "is-enabled after purge": f"exit {enabled.returncode}: {enabled.stdout.strip()}",
        "left after purge": ", ".join(str(p.relative_to(node.root)) for p in
                                      (event_log, etc / "systemd/logind.conf.d/10-operator.conf")
                                      if p.exists()),
        "SIGTERMs at kube-apiserver": str(len(node.apiserver_signals())),
    })
    node.power_off_now()


OPERATOR_ZZ_DROPIN = ("# The operator's own value, masking the package's drop-in of this name\n"
                      "[Login]\nInhibitDelayMaxSec=200\n")


def operator_zz_dropin(root: Path):
    # What the vendor drop-in's comment tells an operator to do to change the value: a file of
    # the same name in /etc. 200 s is above what the shim needs, so the shim writes nothing.
    write(root / "etc/systemd/logind.conf.d/zz-shutdown-shim.conf", OPERATOR_ZZ_DROPIN)


def purge_keeps_operator_file(node: Node, r: Result):
    """apt-get purge with the operator's own zz-shutdown-shim.conf in /etc: it is not the shim's
    (postrm removes the file only when the shim wrote it), so it stays, unchanged."""
    node.start()
    node.wait_ready()
    dropin = node.root / "etc/systemd/logind.conf.d/zz-shutdown-shim.conf"
    delay = node.logind_delay_us()
    r.expect(delay == 200 * US, f"logind at {delay / US:g} s, not the operator's 200 s")
    r.expect(dropin.read_text() == OPERATOR_ZZ_DROPIN, "the shim rewrote the operator's drop-in")
    node.apt("purge", "shutdown-shim", log="apt.log")
    r.expect(dropin.exists() and dropin.read_text() == OPERATOR_ZZ_DROPIN,
             "purge took or changed the operator's own zz-shutdown-shim.conf")
    r.expect(not (node.root / "etc/default/shutdown-shim").exists(),
             "purge left /etc/default/shutdown-shim")
    r.expect(not node.apiserver_signals(),
             f"kube-apiserver got {len(node.apiserver_signals())} signals")
    r.facts.update({"logind before purge": f"{delay / US:g} s",
                    "operator's drop-in after purge": "kept" if dropin.exists() else "gone"})
    node.power_off_now()


@dataclasses.dataclass
class Case:
    name: str
    what: str
    configure: Callable[[Path], None]
    drive: Callable[[Node, Result], None]
    node: str = "package"  # "package": installed before the boot; "bare": not installed


CASES = [
    Case("reboot", "systemctl reboot with the shipped unit and logind drop-in", lambda root: None,
         reboot),
    Case("ensure", "logind at its 5 s default: --ensure-inhibit-delay raises it (KillUnit), "
                   "then systemctl reboot", no_vendor_dropin, ensure),
    Case("kubelet-dropin", f"kubelet's 99-kubelet.conf ({KUBELET_DROPIN_S} s) is never lowered "
                           f"by the shim's vendor drop-in", kubelet_dropin, kubelet_grace),
    Case("lifecycle", "systemd-analyze security, restart while idle, the watchdog",
         watchdog_dropin, lifecycle),
    Case("kill-hold", "systemctl kill -s KILL during a hold that kubelet's lock also holds",
         kubelet_lock, kill_hold),
    Case("ordering", "reboot.target started without logind: the shim drains before the "
                     "runtime stops kube-apiserver's scope", lambda root: None, ordering),
    Case("cancel", "systemctl cancel after the hold, the stop jobs queued behind a slow unit: "
                   "the lock taken again, no second signal", slow_stop_unit, cancel),
    Case("install", "apt-get install on a booted node without the package: enabled, started, "
                    "logind reloaded", lambda root: None, install, node="bare"),
    Case("upgrade", "apt-get install --reinstall of the running package: a restart, no signal",
         lambda root: None, upgrade),
    Case("purge", "apt-get remove, then purge: stopped, conffile kept, then the shim's state "
                  "gone but its event log", operator_dropin, purge),
    Case("purge-operator-file", "apt-get purge keeps an operator's own zz-shutdown-shim.conf",
         operator_zz_dropin, purge_keeps_operator_file),
]


# --- the node layer and the run ----------------------------------------------------------------

def build_package(build_root: Path):
    """The .deb an operator installs: scripts/package --deb-only into BUILD/package, made from
    BUILD when it is set up as the package's (scripts/test's build/), else compiled in
    BUILD/package/.work (incremental: the folder is kept). Returns its path."""
    out = build_root / "package"
    log = build_root / "package.log"
    started = time.monotonic()
    with open(log, "w") as f:
        status = subprocess.run([str(REPO / "scripts/package"), "--deb-only",
                                 f"--build-dir={build_root}", str(out)],
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                timeout=3600).returncode
    text = log.read_text()
    if status != 0:
        raise RuntimeError(f"scripts/package --deb-only {out} exited {status}:\n{text[-3000:]}")
    # Not the -dbgsym package: it is shutdown-shim-dbgsym_*.
    debs = sorted(out.glob("shutdown-shim_*.deb"))
    if len(debs) != 1:
        raise RuntimeError(f"scripts/package left {[d.name for d in debs]} in {out}, not one .deb")
    built = [line for line in text.splitlines() if line.startswith("scripts/package: built")]
    print(f"system: {built[-1] if built else debs[0].name} "
          f"({time.monotonic() - started:.0f} s with lintian)")
    return debs[0]


def prepare_bare_layer(rootfs: Path, apiserver: Path, deb: Path, directory: Path):
    """A control-plane node without the package: the stand-in runtime running kube-apiserver, the
    /readyz watcher, and the .deb in PACKAGE_DIR where the operator copied it."""
    layer = Overlay([rootfs], directory)
    layer.mount()
    try:
        root = layer.root
        shutil.copy2(apiserver, root / "usr/local/bin/kube-apiserver")
        lib = root / "usr/local/lib/system-test"
        lib.mkdir(parents=True)
        for script in ("container-runtime", "kubelet-shutdown-wait"):
            shutil.copy2(GUEST / script, lib)
        for unit in ("containerd.service", "kubelet.service"):
            shutil.copy2(GUEST / unit, root / "etc/systemd/system")
        # The VM test's /readyz watcher, as it is (it logs each change of the status).
        vm_lib = root / "usr/local/lib/vm-test"
        vm_lib.mkdir(parents=True)
        shutil.copy2(VM_GUEST / "vm-readyz-watch", vm_lib)
        shutil.copy2(VM_GUEST / "vm-test-lib.sh", vm_lib)
        shutil.copy2(VM_GUEST / "vm-readyz-watch.service", root / "etc/systemd/system")
        write(root / "etc/system-test/apiserver.env",
              f"APISERVER_SHUTDOWN_DELAY={APISERVER_SHUTDOWN_DELAY}\n")
        # World-readable, so that apt's _apt user can read it (else apt warns and reads it as
        # root).
        package_dir = root / PACKAGE_DIR.relative_to("/")
        package_dir.mkdir(parents=True, mode=0o755)
        shutil.copy2(deb, package_dir)
        (package_dir / deb.name).chmod(0o644)
        run(["systemctl", f"--root={root}", "enable", "containerd.service",
             "vm-readyz-watch.service"])
    finally:
        layer.unmount()
    return layer.upper


def prepare_package_layer(lowers, deb: Path, directory: Path, cgroup_parent):
    """The bare node with the package installed by apt, as an operator installs it before the
    node boots, and the operator's settings appended to its conffile."""
    layer = Overlay(lowers, directory)
    layer.mount()
    cgroups = [Path("/sys/fs/cgroup") / h / cgroup_parent / "node-layer"
               for h in ("systemd", "unified")]
    try:
        root = layer.root
        for cgroup in cgroups:
            cgroup.mkdir(parents=True, exist_ok=True)
        # apt-get in the node's root under nspawn's stub init, without booting it: no systemd
        # runs, so the maintainer scripts only enable the unit (deb-systemd-invoke and the
        # postinst's logind reload need /run/systemd/system). --private-network: apt gets no
        # network, so every Depends must already be in the root file system (scripts/debian-rootfs).
        out = run(in_cgroups(cgroups, [
            "systemd-nspawn", "--quiet", f"--directory={root}", "--machine=shim-node-layer",
            "--register=no", "--keep-unit", "--private-network", "--console=pipe", "--as-pid2",
            "--link-journal=no", "--resolv-conf=off", "--timezone=off",
            "--setenv=DEBIAN_FRONTEND=noninteractive", "--",
            "apt-get", "-y", "-q", "install", str(PACKAGE_DIR / deb.name)]),
            check=False, timeout=600, stdin=subprocess.DEVNULL)
        (directory.parent / "node-layer-apt.log").write_text(out.stdout)
        if out.returncode != 0:
            raise RuntimeError(f"apt-get install {deb.name} in the node layer exited "
                               f"{out.returncode}:\n{out.stdout[-3000:]}")
        wants = root / "etc/systemd/system/multi-user.target.wants/shutdown-shim.service"
        if not wants.is_symlink():
            raise RuntimeError(f"the package did not enable its unit (no {wants})\n{out.stdout}")
        # The operator's settings, appended to the package's conffile. The stand-in apiserver
        # serves plain HTTP: the upstream check probes it there, and the shipped default (https,
        # kubeadm's CA) would keep the node unready.
        with open(root / "etc/default/shutdown-shim", "a") as env:
            env.write(f"\n{SETTINGS_MARK}\nSHUTDOWN_SHIM_DRAIN_DELAY={DRAIN_S}s\n"
                      f"SHUTDOWN_SHIM_EXIT_TIMEOUT={EXIT_TIMEOUT_S}s\n"
                      f"SHUTDOWN_SHIM_UPSTREAM={UPSTREAM}\n")
    finally:
        for cgroup in cgroups:
            remove_cgroup(cgroup)
        layer.unmount()
    return layer.upper


def run_case(case: Case, lowers, work: Path, cgroup_parent, release):
    r = Result(case.name)
    directory = work / case.name
    overlay = Overlay(lowers, directory)
    overlay.mount()
    node = Node(f"shim-{case.name}", overlay, directory, cgroup_parent,
                RELEASES[release]["unified"])
    started = time.monotonic()
    try:
        case.configure(overlay.root)
        case.drive(node, r)
    except Exception as e:  # a case that cannot go on is a failed case, with the reason
        r.failures.append(f"{type(e).__name__}: {e}")
    finally:
        node.stop()
        try:
            (directory / "journal.txt").write_text(Journal(overlay.root).text())
        except Exception as e:
            r.failures.append(f"reading the journal: {e}")
        overlay.unmount()
    r.facts["case took"] = f"{time.monotonic() - started:.1f} s"
    return r


def skip(why):
    if os.environ.get("CI") == "true":
        print(f"system: FAIL: {why} (CI=true: a skip is a failure)", file=sys.stderr)
        sys.exit(1)
    print(f"system: SKIP: {why}", file=sys.stderr)
    sys.exit(77)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-root", required=True, type=Path,
                        help="the meson build root (the stand-in apiserver; package/ is made here)")
    parser.add_argument("--release", choices=list(RELEASES), default="bookworm",
                        help="the Debian release of the node (default: bookworm)")
    parser.add_argument("--case", action="append", choices=[c.name for c in CASES])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = NO_BUS

    if os.geteuid() != 0:
        skip("needs root (systemd-nspawn, overlayfs mounts)")
    for tool in ("systemd-nspawn", "nsenter", "unshare", "journalctl", "curl"):
        if not shutil.which(tool):
            skip(f"{tool} is missing (scripts/test installs systemd-container and curl)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        run(["modprobe", "overlay"], check=False)
        if "overlay" not in Path("/proc/filesystems").read_text():
            skip("the kernel has no overlayfs")
    # Every mount below lives in a mount namespace of this process, gone when it exits.
    if os.environ.get("SHUTDOWN_SHIM_SYSTEM_NS") != "1":
        child = subprocess.run(["unshare", "--mount", "--propagation", "private", "--",
                                sys.executable, __file__, *sys.argv[1:]],
                               env={**os.environ, "SHUTDOWN_SHIM_SYSTEM_NS": "1"})
        sys.exit(child.returncode)
    return run_suite(args)


def run_suite(args):
    started = time.monotonic()
    apiserver = args.build_root / "tests/sandbox/fake_apiserver"
    if not apiserver.exists():
        print(f"system: no {apiserver}: build the tests first", file=sys.stderr)
        return 1
    rootfs = subprocess.run([str(REPO / "scripts/debian-rootfs"), args.release], text=True,
                            stdout=subprocess.PIPE)
    if rootfs.returncode == 77:
        skip("no Debian root file system (see scripts/debian-rootfs above)")
    if rootfs.returncode != 0:
        return 1
    rootfs = Path(rootfs.stdout.strip())
    systemd = run(["dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f", "${Version}",
                   "systemd"]).stdout.strip()
    print(f"system: Debian {RELEASES[args.release]['debian']} ({args.release}), systemd {systemd}"
          f"{', cgroup v2 only' if RELEASES[args.release]['unified'] else ''}: root file system "
          f"{rootfs} ({time.monotonic() - started:.0f} s)")

    # nspawn's own state under /run/systemd/nspawn: a tmpfs of this mount namespace.
    Path("/run/systemd/nspawn").mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "tmpfs", "tmpfs", "/run/systemd/nspawn"])
    work = Path(tempfile.mkdtemp(prefix=f"shim-system-test.{args.release}."))
    cgroup_parent = f"shutdown-shim-system-test.{os.getpid()}"
    ok = False
    try:
        try:
            deb = build_package(args.build_root)
            fields = run(["dpkg-deb", "-f", str(deb), "Version", "Depends"]).stdout
            print("system: " + "; ".join(fields.strip().splitlines()))
            t = time.monotonic()
            bare = prepare_bare_layer(rootfs, apiserver, deb, work / "bare")
            package = prepare_package_layer([bare, rootfs], deb, work / "node", cgroup_parent)
        except (RuntimeError, subprocess.SubprocessError) as e:
            print(f"system: FAIL: {e}", file=sys.stderr)
            return 1
        print(f"system: node layers ready in {time.monotonic() - t:.0f} s (apt-get install: "
              f"{work / 'node-layer-apt.log'})")
        layers = {"bare": [bare, rootfs], "package": [package, bare, rootfs]}
        cases = [c for c in CASES if not args.case or c.name in args.case]
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_case, c, layers[c.node], work, cgroup_parent,
                                   args.release) for c in cases]
            results = [f.result() for f in futures]
        ok = report(cases, results)
        print(f"system: {args.release}: {'PASS' if ok else 'FAIL'} after "
              f"{time.monotonic() - started:.0f} s ({len(cases)} cases, {args.jobs} at a time)")
    finally:
        for hierarchy in ("systemd", "unified"):
            remove_cgroup(Path("/sys/fs/cgroup") / hierarchy / cgroup_parent)
        if args.keep or not ok:
            print(f"system: kept {work} (journal.txt and console.log per case)")
        else:
            shutil.rmtree(work)
    return 0 if ok else 1


def report(cases, results):
    ok = True
    for case, r in zip(cases, results):
        print(f"\n== {r.name}: {'PASS' if not r.failures else 'FAIL'}  ({case.what})")
        width = max(len(k) for k in r.facts) if r.facts else 0
        for key, value in r.facts.items():
            print(f"  {key:<{width}}  {value}")
        for failure in r.failures:
            print(f"  FAILED: {failure}")
        ok = ok and not r.failures
    return ok


if __name__ == "__main__":
    sys.exit(main())
