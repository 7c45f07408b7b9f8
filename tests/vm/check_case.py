#!/usr/bin/env python3
"""Checks what one VM boot per case left behind (scripts/vm-test reads it from the guest's image)
and prints a summary per case. All times are the guest's CLOCK_MONOTONIC: the journal's
__MONOTONIC_TIMESTAMP, the shim's event log (monotonic_us) and the stand-in apiserver's logs.

Cases that must hold the reboot for the whole drain: dropin, ensure. The case default must show
logind's 5 s InhibitDelayMaxSec cutting the hold short. The checks are about order (which came
first) and the hold's lower bound, never an upper time bound."""

import argparse
import json
import os
import re
import sys

FULL_HOLD_CASES = {"dropin", "ensure"}


def parse_duration_us(text):
    match = re.fullmatch(r"(\d+)(ms|s)", text)
    if not match:
        raise ValueError(f"unsupported duration {text}")
    return int(match.group(1)) * (1000 if match.group(2) == "ms" else 1_000_000)


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    except FileNotFoundError:
        return []


def message_text(entry):
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):  # journalctl's form for non-UTF-8 messages
        message = bytes(message).decode(errors="replace")
    return message or ""


class Case:
    def __init__(self, name, directory):
        self.name = name
        self.dir = directory
        self.journal = []
        for line in read_lines(os.path.join(directory, "journal.json")):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.journal.append((int(entry["__MONOTONIC_TIMESTAMP"]), entry, message_text(entry)))
        self.journal.sort(key=lambda x: x[0])
        self.events = [json.loads(l) for l in read_lines(os.path.join(directory, "events.jsonl"))]
        self.signals = [l.split() for l in read_lines(os.path.join(directory, "apiserver-signals.log"))]
        self.lifecycle = [l.split() for l in read_lines(os.path.join(directory, "apiserver-lifecycle.log"))]
        self.serial = "\n".join(read_lines(os.path.join(directory, "serial.log")))
        rc = read_lines(os.path.join(directory, "qemu.rc"))
        self.qemu_rc = int(rc[0]) if rc else None

    def first(self, predicate, after=0):
        for t, entry, message in self.journal:
            if t >= after and predicate(entry, message):
                return t, message
        return None, None

    def event_times(self, kind):
        return [e["monotonic_us"] for e in self.events if e.get("event") == kind]


def ms(t, since):
    return "-" if t is None or since is None else f"{(t - since) / 1000:.0f} ms"


def check(case, drain_us):
    failures = []
    facts = {}

    def expect(condition, what):
        if not condition:
            failures.append(what)
        return condition

    identifier = lambda e: e.get("SYSLOG_IDENTIFIER", "")
    trigger_t, _ = case.first(lambda e, m: m == "vm-test: systemctl reboot")
    _, delay_line = case.first(lambda e, m: m.startswith("vm-test: logind t "))
    delay_max_us = int(delay_line.split()[-1]) if delay_line else None
    inhibitors = [m for _, _, m in case.journal if m.startswith("vm-test: inhibitor ")]
    unready_t, unready = case.first(
        lambda e, m: m.startswith("vm-test: readyz ") and m.split()[-1] != "200", trigger_t or 0)
    timeout_t, _ = case.first(
        lambda e, m: identifier(e) == "systemd-logind" and "inhibitor timeout is reached" in m)
    rebooting_t, _ = case.first(
        lambda e, m: identifier(e) == "systemd-logind" and m.startswith("System is rebooting"))
    # What PID 1 did to the shim, the stand-in and the first units after the reboot began.
    after = [(t, m) for t, e, m in case.journal
             if trigger_t and t > trigger_t and e.get("_PID") == "1"]
    stops = [(t, m) for t, m in after if m.startswith("Stopping ")]
    shown = stops[:3] + [(t, m) for t, m in after
                         if ("shutdown-shim" in m or "kube-apiserver" in m) and (t, m) not in stops[:3]]
    pid1 = [(t, m) for t, e, m in case.journal if e.get("_PID") == "1"]
    shim_stopped_t = next((t for t, m in pid1 if trigger_t and t > trigger_t and
                           m.startswith("Stopped shutdown-shim.service")), None)
    apiserver_stopped_t = next((t for t, m in pid1 if trigger_t and t > trigger_t and
                                m.startswith("Stopped kube-apiserver.service")), None)
    # A stop that ran into TimeoutStopSec: systemd SIGKILLs the unit and the reboot waits for it.
    stop_timeouts = [m for _, m in pid1 if "timed out. Killing" in m]
    restart_match = re.search(r"\[\s*([0-9.]+)\] reboot: Restarting system", case.serial)
    # printk's clock; close to CLOCK_MONOTONIC in a guest that never suspends.
    down_t = int(float(restart_match.group(1)) * 1e6) if restart_match else None

    initiated = case.event_times("ShutdownInitiated")
    forwarded = case.event_times("SignalForwarded")
    drained = case.event_times("DrainElapsed")
    released = case.event_times("InhibitorReleased")
    taken = case.event_times("InhibitorTaken")
    initiated_t = initiated[0] if initiated else None
    released_t = next((t for t in released if initiated_t and t > initiated_t), None)
    drained_t = drained[0] if drained else None
    signals = [(s[0], int(s[1])) for s in case.signals if len(s) >= 2]
    apiserver_exit = next((l for l in case.lifecycle if l and l[0] == "EXIT"), None)

    start_failures = [m for _, e, m in case.journal
                      if m.startswith("Failed to start shutdown-shim.service")]
    if start_failures:
        reason = next((m for _, e, m in case.journal
                       if m.startswith("shutdown-shim.service: ") and "Failed at step" in m
                       or m.startswith("shutdown-shim.service: Failed to ")), "see journal.txt")
        expect(False, f"shutdown-shim.service failed to start {len(start_failures)} times: {reason}")
    expect(case.qemu_rc == 0, f"qemu exited with {case.qemu_rc} (timeout or crash), see serial.log")
    expect("reboot: Restarting system" in case.serial,
           "the serial console never showed the kernel's 'reboot: Restarting system'")
    expect(case.journal, "no journal in the image")
    expect(trigger_t is not None, "the guest never ran systemctl reboot (vm-reboot-trigger)")
    expect(taken, "the shim never took the inhibitor lock (no InhibitorTaken event)")
    expect(initiated_t is not None and trigger_t is not None and initiated_t > trigger_t,
           "no ShutdownInitiated event after systemctl reboot")
    expect(unready_t is not None and (rebooting_t is None or unready_t < rebooting_t),
           "the readiness watcher never saw /readyz turn unready before the reboot went on")
    expect(len(forwarded) == 1, f"{len(forwarded)} SignalForwarded events, expected 1")
    expect(signals and trigger_t is not None and signals[0][1] > trigger_t,
           "the stand-in apiserver got no signal after systemctl reboot")
    expect(rebooting_t is not None, "logind never logged 'System is rebooting'")

    if case.name in FULL_HOLD_CASES:
        expect(delay_max_us is not None and delay_max_us > drain_us,
               f"logind's InhibitDelayMaxUSec was {delay_max_us} at the reboot, not above the drain")
        expect(len(signals) == 1, f"the stand-in apiserver got {len(signals)} signals, expected 1")
        expect(timeout_t is None, "logind cut the hold short ('inhibitor timeout is reached')")
        expect(drained_t is not None, "no DrainElapsed event")
        expect(released_t is not None, "the shim never released the lock after the shutdown began")
        if None not in (released_t, drained_t, rebooting_t, initiated_t, trigger_t):
            expect(drained_t <= released_t <= rebooting_t,
                   "order: expected DrainElapsed <= InhibitorReleased <= logind's 'System is rebooting'")
            expect(released_t - initiated_t >= drain_us, "the lock was released before the drain passed")
            expect(rebooting_t - trigger_t >= drain_us, "the reboot went on before the drain passed")
        expect(stops and released_t is not None and stops[0][0] >= released_t,
               "PID 1 began stopping units before the lock was released")
    else:
        expect(delay_max_us == 5_000_000,
               f"logind's InhibitDelayMaxUSec was {delay_max_us}, expected the 5 s default")
        expect(timeout_t is not None, "logind never logged 'inhibitor timeout is reached'")
        expect(rebooting_t is not None and (drained_t is None or rebooting_t < drained_t),
               "the reboot did not go on before the drain passed: the 5 s default did not cut the hold")
    for message in stop_timeouts:
        expect(False, f"a unit's stop timed out, delaying the reboot: {message}")

    facts.update({
        "ShutdownInitiated": ms(initiated_t, trigger_t),
        "logind max delay": f"{delay_max_us / 1e6:g} s" if delay_max_us is not None else "-",
        "unready (readyz watch)": ms(unready_t, trigger_t),
        "SIGTERMs at apiserver": f"{len(signals)} at " + ", ".join(ms(t, trigger_t) for _, t in signals),
        "apiserver exit": (f"{ms(int(apiserver_exit[1]), trigger_t)} code {apiserver_exit[2]}"
                           if apiserver_exit and len(apiserver_exit) >= 3 else "-"),
        "DrainElapsed": ms(drained_t, trigger_t),
        "lock released": ms(released_t, trigger_t),
        "logind timeout msg": ms(timeout_t, trigger_t) if timeout_t else "no",
        "reboot went on": ms(rebooting_t, trigger_t),
        "hold (unready -> went on)": ms(rebooting_t, initiated_t),
        "first PID 1 Stopping": ms(stops[0][0], trigger_t) if stops else "-",
        "Stopped apiserver / shim": (f"{ms(apiserver_stopped_t, trigger_t)} / "
                                     f"{ms(shim_stopped_t, trigger_t)}"),
        "stop timeouts (SIGKILL)": str(len(stop_timeouts)),
        "kernel reboot (~)": ms(down_t, trigger_t),
    })
    return failures, facts, sorted(shown), inhibitors, trigger_t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--drain", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    drain_us = parse_duration_us(args.drain)

    results = {}
    ok = True
    for name in args.cases:
        case = Case(name, os.path.join(args.work, name))
        failures, facts, stops, inhibitors, trigger_t = check(case, drain_us)
        results[name] = facts
        print(f"\n== case {name}: {'PASS' if not failures else 'FAIL'}  (times from `systemctl reboot`)")
        for line in inhibitors:
            print("  " + line.removeprefix("vm-test: "))
        for t, message in stops:
            print(f"  {ms(t, trigger_t):>9}  PID 1: {message}")
        for failure in failures:
            print(f"  FAILED: {failure}")
        ok = ok and not failures

    keys = list(next(iter(results.values())).keys())
    width = max(len(k) for k in keys)
    print("\n" + " " * width + " | " + " | ".join(f"{n:>24}" for n in results))
    for k in keys:
        print(f"{k:<{width}} | " + " | ".join(f"{results[n][k]:>24}" for n in results))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
