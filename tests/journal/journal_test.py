#!/usr/bin/python3
"""`shutdown-shim report --journal` against a real systemd-journald, and the journal catalog.

The script runs itself again under `unshare -m` with tmpfs over /run and /var/log: the journald it
starts there listens on that namespace's /run/systemd/journal and writes that namespace's
/var/log/journal, so the machine's journal is never touched. Each boot is a journald started with
another /proc/sys/kernel/random/boot_id bind-mounted over the real one; in it journal_event_writer
records events through the shim's own logger and event_recorder, with stderr on journald's stream
(systemd-cat) and JOURNAL_STREAM naming it, as systemd sets it for a unit. Then, in a third boot,
the report from the journal must be the report from the event log, byte for byte.

Without root or unshare(1): exit 77 (skipped), or 1 under CI=true, where a skip is a failure.
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
import uuid

INNER = "SHUTDOWN_SHIM_JOURNAL_TEST_INNER"
JOURNALD = "/lib/systemd/systemd-journald"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
JOURNAL = "/var/log/journal"

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def skip(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL: {why} (CI=true: a skip is a failure)", file=sys.stderr)
        return 1
    print(f"SKIP: {why}", file=sys.stderr)
    return 77


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


def message_ids(event_kind_hpp):
    table = open(event_kind_hpp).read()
    return dict(re.findall(r'\{"(\w+)", log_level::\w+, "([0-9a-f]{32})"\}', table))


class Boot:
    """A journald under its own boot id, ready when it has sent READY=1 (it speaks sd_notify)."""

    def __init__(self, work, boot_id):
        self.boot_id = boot_id
        id_file = os.path.join(work, f"boot-{boot_id}")
        with open(id_file, "w") as f:
            f.write(str(uuid.UUID(boot_id)) + "\n")
        subprocess.run(["mount", "--bind", id_file, BOOT_ID], check=True)
        notify_path = os.path.join(work, f"notify-{boot_id}")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(30)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        self.journald = subprocess.Popen([JOURNALD], env=env, stdout=subprocess.DEVNULL,
                                         stderr=open(os.path.join(work, "journald.log"), "a"))
        while b"READY=1" not in notify.recv(4096):
            pass
        notify.close()
        # From /run to /var/log/journal, as systemd-journal-flush.service does at boot.
        subprocess.run(["journalctl", "--flush"], check=True, timeout=30)

    def write(self, writer, event_log, *events):
        # systemd-cat connects stdout and stderr to journald's stream; JOURNAL_STREAM is what
        # systemd would set for a unit (systemd-cat 252 does not).
        script = 'export JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2); exec "$0" "$@"'
        r = run(["systemd-cat", "-t", "shutdown-shim", "sh", "-c", script, writer, event_log,
                 *events])
        check(r.returncode == 0, f"journal_event_writer {' '.join(events)}: exit {r.returncode}")

    def close(self):
        subprocess.run(["journalctl", "--sync"], check=True, timeout=30)
        self.journald.terminate()
        self.journald.wait(timeout=30)
        subprocess.run(["umount", BOOT_ID], check=True)


def forge(fields):
    """An entry with the shim's fields from another user than root: report must ignore it."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto("".join(f"{k}={v}\n" for k, v in fields.items()).encode(),
                     "/run/systemd/journal/socket")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


LOGIND_TIMEOUT = ("Delay lock is active (UID 0/root, PID 4242/shutdown-shim) but inhibitor timeout "
                  "is reached.")


def as_logind(work, fields):
    """An entry from root whose command is systemd-logind (journald records _COMM from the
    sender's process, which no sender can set): logger(1) copied under logind's name."""
    sender = os.path.join(work, "systemd-logind")
    shutil.copy(shutil.which("logger"), sender)
    r = subprocess.run([sender, "--journald"], input="".join(f"{k}={v}\n" for k, v in
                                                             fields.items()),
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, f"logger --journald as systemd-logind: exit {r.returncode} {r.stderr}")


def journal_entries(*matches):
    r = run(["journalctl", "-D", JOURNAL, "-o", "json", "--no-pager", *matches])
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def report(shim, *args):
    r = run([shim, "report", "--journal-dir=" + JOURNAL, *args])
    print(f"report {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def inner(args):
    ids = message_ids(args.event_kind)
    for target in ("/run", "/var/log"):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", target], check=True)
    os.makedirs(JOURNAL)
    work = tempfile.mkdtemp(dir="/run")
    event_log = os.path.join(work, "events.jsonl")

    # Boot A: the shim dies under the lock (signalled, never released): cut short.
    a = Boot(work, "aaaaaaaa00004000800000000000000a")
    a.write(args.writer, event_log, "Started", "InhibitorTaken", "ShutdownInitiated",
            "SignalForwarded")
# A forged logind timeout (issue 35, item 4: uid 65534 with logind's identifier and words
    # turned "SIGKILL or crash" into logind's InhibitDelayMaxSec): report must not believe it.
    forge({"MESSAGE": LOGIND_TIMEOUT, "SYSLOG_IDENTIFIER": "systemd-logind", "PRIORITY": "4"})
    a.close()
    # Boot D: cut short again, and this time logind itself says its timeout ended the hold.
    d = Boot(work, "dddddddd00004000800000000000000d")
    d.write(args.writer, event_log, "Started", "InhibitorTaken", "ShutdownInitiated",
            "SignalForwarded")
    as_logind(work, {"MESSAGE": LOGIND_TIMEOUT, "SYSLOG_IDENTIFIER": "systemd-logind",
                     "PRIORITY": "4"})
    d.close()
    # Boot B: a restart, then a whole drain, with kubelet's two-line words; then a forged release
    # (not root) after it, which would make the hold "in progress" if it counted.
    b = Boot(work, "bbbbbbbb00004000800000000000000b")
    b.write(args.writer, event_log, "Started", "InhibitorTaken")
    b.write(args.writer, event_log, "Started", "InhibitorTaken", "ShutdownInitiated",
            "KubeletShutdown", "SignalForwarded", "TargetExited", "DrainElapsed",
            "InhibitorReleased")
    forge({"MESSAGE": "forged", "MESSAGE_ID": ids["ShutdownInitiated"],
           "SHUTDOWN_SHIM_EVENT": "ShutdownInitiated", "SHUTDOWN_SHIM_MONOTONIC_US": "1"})
    b.close()

    # The next boot, where the report runs.
    id_file = os.path.join(work, "boot-next")
    with open(id_file, "w") as f:
        f.write(str(uuid.UUID("cccccccc00004000800000000000000c")) + "\n")
    subprocess.run(["mount", "--bind", id_file, BOOT_ID], check=True)

    initiated = journal_entries("MESSAGE_ID=" + ids["ShutdownInitiated"])
    by_root = [e for e in initiated if e.get("_UID") == "0"]
    check(len(by_root) == 3 and len(initiated) == 4,
          f"journalctl MESSAGE_ID=<ShutdownInitiated> lists the 3 shutdowns (and the forged one):"
          f" {len(by_root)} by root of {len(initiated)}")
    if by_root:
        e = by_root[-1]
        want = {"SHUTDOWN_SHIM_EVENT": "ShutdownInitiated", "PRIORITY": "5",
                "SHUTDOWN_SHIM_CAUSE": "PrepareForShutdown(true)",
                "SHUTDOWN_SHIM_INHIBIT_DELAY_MAX_USEC": "150000000",
                "SHUTDOWN_SHIM_FIELD_PID": "4242", "_TRANSPORT": "journal",
                "_BOOT_ID": "bbbbbbbb00004000800000000000000b"}
        got = {k: e.get(k) for k in want}
        check(got == want, f"ShutdownInitiated's fields: {got}")
        check(e.get("MESSAGE", "").startswith("the system is shutting down event=ShutdownInitiated"),
              f"MESSAGE is the line stderr had: {e.get('MESSAGE')!r}")
        check(all(k in e for k in ("SHUTDOWN_SHIM_WALL", "SHUTDOWN_SHIM_MONOTONIC_US",
                                   "SHUTDOWN_SHIM_BOOTTIME_US", "SHUTDOWN_SHIM_MESSAGE")),
              "the record's clocks and message are fields")
    every = journal_entries("_UID=0", "_TRANSPORT=journal")
    check(sorted({e["MESSAGE_ID"] for e in every if "MESSAGE_ID" in e} - set(ids.values())) == [],
          "every structured entry has one of kEvents' ids")
    check(len([e for e in every if "SHUTDOWN_SHIM_EVENT" in e]) == 18,
          f"18 events structured in the journal: {len(every)}")
    stream = journal_entries("_TRANSPORT=stdout")
    check(not [e for e in stream if "event=" in str(e.get("MESSAGE"))],
          "no event went to the stream as well (the native entry replaces the line)")

    from_log = report(args.shim, "--event-log=" + event_log, "--json")
    from_journal = report(args.shim, "--journal", "--json")
    by_default = report(args.shim, "--event-log=" + os.path.join(work, "absent.jsonl"), "--json")
    check(from_log.returncode == 0 and from_log.stdout != "", "report from the event log: exit 0")
    check(from_journal.returncode == 0, "report --journal: exit 0 (the last shutdown was clean)")
    check(from_journal.stdout == from_log.stdout, "report --journal == report from the event log")
    check(by_default.returncode == 0 and by_default.stdout == from_log.stdout
          and "read the journal" in by_default.stderr,
          "without an event log, report reads the persistent journal")
    rows = [json.loads(line) for line in from_journal.stdout.splitlines()]
    check([(r["boot_id"], r["verdict"], r.get("cut_short_cause")) for r in rows] ==
          [("aaaaaaaa00004000800000000000000a", "cut short", "shim_died"),
           ("dddddddd00004000800000000000000d", "cut short", "logind_timeout"),
           ("bbbbbbbb00004000800000000000000b", "clean", None)],
          "verdicts: boot A cut short (the shim died; the forged logind line ignored), boot D "
          "cut short by logind's timeout (logind's own line), boot B clean")
    check(rows and rows[-1].get("kubelet") == "kubelet drains its pods first\nthen the shim's signal",
          "a two-line message comes back whole")
    table_log = report(args.shim, "--event-log=" + event_log)
    table_journal = report(args.shim, "--journal")
    check(table_log.stdout == table_journal.stdout, "the tables are the same too")
    subprocess.run(["umount", BOOT_ID], check=True)


def check_catalog(args):
    ids = message_ids(args.event_kind)
    with tempfile.TemporaryDirectory() as root:
        catalog_dir = os.path.join(root, "usr/lib/systemd/catalog")
        os.makedirs(catalog_dir)
        shutil.copy(args.catalog, catalog_dir)
        r = run(["journalctl", "--root=" + root, "--update-catalog"])
        check(r.returncode == 0 and r.stderr == "",
              f"journalctl --update-catalog takes the catalog: exit {r.returncode} {r.stderr}")
        listed = run(["journalctl", "--root=" + root, "--list-catalog"]).stdout
        missing = [name for name, i in ids.items() if i not in listed]
        check(not missing, f"every MESSAGE_ID is in the catalog: missing {missing}")
        dumped = run(["journalctl", "--root=" + root, "--dump-catalog",
                      ids["ShutdownInitiated"]]).stdout
        check("Subject: A system shutdown began" in dumped and "Defined-By: shutdown-shim" in dumped,
              "the ShutdownInitiated entry has its Subject and Defined-By")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shim", required=True)
    p.add_argument("--writer", required=True)
    p.add_argument("--catalog", required=True)
    p.add_argument("--event-kind", required=True)
    args = p.parse_args()
    if os.environ.get(INNER):
        inner(args)
    else:
        check_catalog(args)
        if os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists(JOURNALD):
            return skip("needs root, unshare(1) and systemd-journald")
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                            *sys.argv], env=dict(os.environ, **{INNER: "1"}), timeout=110)
        if r.returncode != 0:
            failures.append(f"in the mount namespace: exit {r.returncode}")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
