#!/usr/bin/python3
"""The real apiserver and node agents (tests/realapi), built by scripts/realapi, tried as the
other tests will use them: a k8s.io/apiserver server's start-up, its one-SIGTERM shutdown (with
and without --shutdown-send-retry-after), its second-SIGTERM exit, and client-go agents through a
shutdown and a restart.

Everything runs on 127.0.0.1 over TLS, verified against the certificate each server generates
in its --cert-dir; no bus, no root needed once the binaries are built. Python's standard library
(HTTP/1.1) sends the requests, curl the two that show what HTTP/2 does with a connection. Waits are bounded and wait
for events (a log line, an answer); times are only checked as lower bounds the library sets (the
shutdown delay, the startup wait, client-go's Retry-After), never as speed.

  smoke_test.py --script scripts/realapi   # builds (or finds) the binaries first
  smoke_test.py --bin-dir DIR              # binaries already built

scripts/realapi exits 77 when it cannot build (not root, the mirror unreachable): this test
then exits 77 (skipped), or 1 under CI=true, where a skip is a failure.
"""

import argparse
import csv
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback

TOKEN = "smoke-token"
SIGTERM_DELAY_S = 3  # case_sigterm's shutdown delay, on case_startup_and_api's server
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def skip(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL: {why} (CI=true: a skip is a failure)", file=sys.stderr)
        return 1
    print(f"SKIP: {why}", file=sys.stderr)
    return 77


def wait_for(what, predicate, timeout=60):
    """Polls predicate until it returns something true; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def monotonic_us():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def read_lines(path):
    try:
        with open(path) as f:
            return [line.split(" ", 2) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


class ServerProcess:
    """A server (realapi or the stand-in, which take the same flags for these) started with its
    port file, pidfile, signal and lifecycle logs and stderr in its own directory."""

    def __init__(self, directory, name, program, *flags):
        self.dir = directory
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.path = {k: os.path.join(self.dir, k) for k in ("port", "pid", "signals", "lifecycle")}
        argv = [program, f"--port-file={self.path['port']}", f"--pidfile={self.path['pid']}",
                f"--signal-log={self.path['signals']}",
                f"--lifecycle-log={self.path['lifecycle']}", f"--name={name}", *flags]
        self.stderr = open(os.path.join(self.dir, "stderr"), "w")
        self.started_us = monotonic_us()
        self.proc = subprocess.Popen(argv, stdout=self.stderr, stderr=self.stderr)
        self.port = int(wait_for(f"{name}'s port file", self._port))

    def _port(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited {self.proc.returncode} before listening")
        try:
            with open(self.path["port"]) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def lifecycle(self):
        return read_lines(self.path["lifecycle"])

    def events(self):
        return [words[0] for words in self.lifecycle()]

    def sigterm(self):
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout=120):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


class Server(ServerProcess):
    """One realapi process with its files in its own directory."""

    def __init__(self, bin_dir, work, name, *flags, port=0, cert_dir=None):
        directory = os.path.join(work, name)
        self.cert_dir = cert_dir or os.path.join(directory, "certs")
        super().__init__(directory, name, os.path.join(bin_dir, "realapi"),
                         f"--listen=127.0.0.1:{port}", f"--token={TOKEN}",
                         f"--cert-dir={self.cert_dir}", *flags)
        self.tls = ssl.create_default_context(cafile=os.path.join(self.cert_dir, "apiserver.crt"))

    def send(self, path, method="GET", token=True, body=None, content_type=None):
        """A new connection (HTTP/1.1) with the request sent on it."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls, timeout=60)
        headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=body, headers=headers)
        except BaseException:
            conn.close()
            raise
        return conn

    def request(self, path, method="GET", token=True, body=None, content_type=None):
        """(status, headers, body) of one request on a new connection."""
        conn = self.send(path, method, token, body, content_type)
        try:
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read().decode()
        finally:
            conn.close()

    def event_us(self, word):
        return next((int(w[1]) for w in self.lifecycle() if w[0] == word), None)

    def signals(self):
        return [words[0] for words in read_lines(self.path["signals"])]


class Agent:
    """One nodeagent writing node `node` on server's port, until stopped."""

    def __init__(self, bin_dir, work, name, port, cert_dir, *flags):
        self.csv = os.path.join(work, f"agent-{name}.csv")
        self.transitions = os.path.join(work, f"agent-{name}.transitions")
        self.stderr = open(os.path.join(work, f"agent-{name}.stderr"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "nodeagent"), f"--server=https://127.0.0.1:{port}",
             f"--token={TOKEN}", f"--certificate-authority={cert_dir}/apiserver.crt",
             f"--node={name}", f"--csv={self.csv}", f"--transition-log={self.transitions}",
             *flags], stdout=subprocess.DEVNULL, stderr=self.stderr)

    def rows(self):
        try:
            with open(self.csv) as f:
                return [r for r in csv.DictReader(f) if r.get("request")]
        except FileNotFoundError:
            return []

    def transition_words(self):
        return [w[0] for w in read_lines(self.transitions)]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.stderr.close()
        return code


def connections_for_two(server, token=True):
    """(connections opened, GOAWAY seen) for two GET /readyz by one curl over HTTP/2: Python's
    standard library speaks only HTTP/1.1."""
    url = f"https://127.0.0.1:{server.port}/readyz"
    argv = ["curl", "-sSv", "--http2", "--cacert", os.path.join(server.cert_dir, "apiserver.crt"),
            "-o", "/dev/null", "-o", "/dev/null", url, url]
    if token:
        argv += ["-H", f"Authorization: Bearer {TOKEN}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stderr
    if out.count("< HTTP/2 200") != 2:
        raise AssertionError(f"curl's two requests over HTTP/2 did not both answer 200:\n{out}")
    return out.count("* Connected to"), "GOAWAY" in out


def hold_in_flight(server, seconds):
    """Sends GET /hold?seconds=N now; its status (or the exception) is read on a thread."""
    conn = server.send(f"/hold?seconds={seconds}")
    result = []

    def read():
        try:
            result.append(conn.getresponse().status)
        except (OSError, http.client.HTTPException) as e:
            result.append(e)
        finally:
            conn.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, result


def case_startup_and_api(bin_dir, work):
    """Start-up as long as --startup-wait, then the node agents' API, anonymous and not."""
    wait_s = 5
    s = Server(bin_dir, work, "startup", f"--startup-wait={wait_s}s",
               f"--shutdown-delay-duration={SIGTERM_DELAY_S}s")
    try:
        check(open(s.path["pid"]).read().strip() == str(s.proc.pid), "startup: pidfile names it")
        check(s.events()[:1] == ["LISTENING"], "startup: LISTENING once the port is open")
        status, _, body = s.request("/readyz?verbose")
        check(status == 500 and "[-]poststarthook/realapi-startup-wait failed" in body,
              f"startup: /readyz 500 while the post-start hook waits (got {status})")
        wait_for("/readyz 200", lambda: s.request("/readyz")[0] == 200)
        ready_us = monotonic_us()
        check(ready_us - s.event_us("LISTENING") >= wait_s * 1e6,
              f"startup: ready no sooner than --startup-wait={wait_s}s after LISTENING")
        print(f"FIGURES startup: LISTENING {(s.event_us('LISTENING') - s.started_us) / 1e3:.0f} ms "
              f"after the start, ready {(ready_us - s.started_us) / 1e6:.2f} s after it "
              f"(--startup-wait={wait_s}s)", flush=True)

        status, headers, body = s.request("/readyz", token=False)
        check(status == 200 and headers["X-Backend"] == "startup",
              "api: anonymous /readyz 200 (public), X-Backend set")
        status, headers, body = s.request("/api/v1/nodes/n1/status", "PATCH", token=False,
                                          body="{}", content_type="application/merge-patch+json")
        check(status == 403 and headers["X-Backend"] == "startup",
              f"api: anonymous PATCH of a node 403 Forbidden (got {status})")
        versions = []
        for path in ("/api/v1/nodes/n1/status", "/api/v1/nodes/n1"):
            status, headers, body = s.request(path, "PATCH", body='{"metadata":{}}',
                                              content_type="application/merge-patch+json")
            node = json.loads(body) if status == 200 else {}
            check(status == 200 and node.get("kind") == "Node" and
                  node["metadata"]["name"] == "n1", f"api: PATCH {path} 200 with the Node")
            versions.append(int(node.get("metadata", {}).get("resourceVersion", 0)))
        check(versions[1] > versions[0] > 0, f"api: resourceVersion grows ({versions})")
        status, headers, body = s.request("/api/v1/nodes/n1", "PATCH", body="{}",
                                          content_type="text/plain")
        check(status == 415 and json.loads(body).get("reason") == "UnsupportedMediaType" and
              headers["X-Backend"] == "startup", f"api: PATCH as text/plain 415 (got {status})")
        status, _, body = s.request("/version")
        check(status == 200 and json.loads(body).get("major") == "1", "api: /version 200")
        anonymous, with_token = connections_for_two(s, token=False), connections_for_two(s)
        check(anonymous == (2, True) and with_token == (1, False),
              "api: over HTTP/2 an anonymous answer ends its connection (GOAWAY), one with a "
              f"token keeps it (connections, GOAWAY: {anonymous}, {with_token})")
        status, _, body = s.request("/api/v1/namespaces/default")
        check(status == 200 and json.loads(body).get("kind") == "Namespace",
              "api: GET namespace 200")
        return s
    except BaseException:
        s.stop()
        raise


def case_sigterm(s):
    """One SIGTERM: unready at once, served through the delay, then the drain and exit 0."""
    delay_s = SIGTERM_DELAY_S
    s.sigterm()
    wait_for("UNREADY", lambda: "UNREADY" in s.events())
    status, _, body = s.request("/readyz")
    check(status == 500 and "[-]shutdown failed: reason withheld" in body,
          f"sigterm: /readyz 500 'shutdown failed' once UNREADY is logged (got {status})")
    check(s.request("/livez")[0] == 200, "sigterm: /livez still 200")
    status = s.request("/version")[0]
    served_in_delay = "NOT_ACCEPTING" not in s.events()
    check(status == 200 and served_in_delay, f"sigterm: served during the delay (got {status})")
    code = s.wait()
    check(code == 0, f"sigterm: exit 0 (got {code})")
    events = s.events()
    # Without --shutdown-send-retry-after the listener's close and the drain run side by side.
    check(events[:3] == ["LISTENING", "UNREADY", "NOT_ACCEPTING"] and
          sorted(events[3:5]) == ["IN_FLIGHT_DRAINED", "STOPPED_LISTENING"] and
          events[5:] == ["EXIT"], f"sigterm: lifecycle {events}")
    check(s.event_us("NOT_ACCEPTING") - s.event_us("UNREADY") >= delay_s * 1e6,
          f"sigterm: not accepting only after --shutdown-delay-duration={delay_s}s")
    check(s.lifecycle()[-1][2:] == ["0"], "sigterm: EXIT 0 logged")
    check(s.signals() == ["SIGTERM"], f"sigterm: one SIGTERM logged ({s.signals()})")
    sigterm_us = int(read_lines(s.path["signals"])[0][1])
    print(f"FIGURES sigterm: UNREADY {s.event_us('UNREADY') - sigterm_us} us after the SIGTERM, "
          f"EXIT {(s.event_us('EXIT') - sigterm_us) / 1e6:.2f} s after it", flush=True)
    try:
        s.request("/readyz")
        check(False, "sigterm: port closed after the exit")
    except ConnectionRefusedError:
        check(True, "sigterm: port closed after the exit")
    s.stop()


def case_second_sigterm(bin_dir, work):
    """A second SIGTERM during the delay: exit 1 at once, the request in flight cut."""
    s = Server(bin_dir, work, "second", "--shutdown-delay-duration=60s")
    try:
        wait_for("/readyz 200", lambda: s.request("/readyz")[0] == 200)
        thread, held = hold_in_flight(s, 50)
        s.sigterm()
        wait_for("UNREADY", lambda: "UNREADY" in s.events())
        s.sigterm()
        code = s.wait(timeout=30)  # far less than the 60 s delay: it was the second signal
        check(code == 1, f"second: exit 1 (got {code})")
        check(s.signals() == ["SIGTERM", "SIGTERM"], "second: two SIGTERMs logged")
        check(s.lifecycle()[-1][0] == "EXIT" and s.lifecycle()[-1][2] == "1 second signal",
              f"second: EXIT 1 logged ({s.lifecycle()[-1]})")
        check("NOT_ACCEPTING" not in s.events(), "second: no drain")
        thread.join(timeout=30)
        check(held and isinstance(held[0], Exception), f"second: the held request failed {held}")
    finally:
        s.stop()


def case_retry_after(bin_dir, work):
    """--shutdown-send-retry-after: 429 + Retry-After after the delay until in-flight drained.

    A client-go agent meets the 429 and waits out Retry-After before its next attempt."""
    # The held request reaches the server within the delay, before which it is sent.
    delay_s, hold_s = 3, 12
    s = Server(bin_dir, work, "retry-after", f"--shutdown-delay-duration={delay_s}s",
               "--shutdown-send-retry-after")
    agent = None
    try:
        wait_for("/readyz 200", lambda: s.request("/readyz")[0] == 200)
        agent = Agent(bin_dir, work, "n-retry-after", s.port, s.cert_dir, "--interval=250ms")
        wait_for("the agent's first answers", lambda: len(agent.rows()) >= 4)
        thread, held = hold_in_flight(s, hold_s)
        s.sigterm()
        wait_for("NOT_ACCEPTING", lambda: "NOT_ACCEPTING" in s.events())
        status, headers, _ = s.request("/version")
        check(status == 429 and headers["Retry-After"] == "5" and
              headers["X-Backend"] == "retry-after",
              f"retry-after: 429 Retry-After: 5 after the delay (got {status})")
        in_flight = "IN_FLIGHT_DRAINED" not in s.events()
        check(in_flight, "retry-after: ... while the held request is in flight")
        status, _, body = s.request("/readyz")
        check(status == 500 and "shutdown" in body, "retry-after: /readyz still answers 500")
        thread.join(timeout=60)
        check(held == [200], f"retry-after: the held request finished 200 ({held})")
        code = s.wait()
        check(code == 0, f"retry-after: exit 0 (got {code})")
        events = s.events()
        # With it the listener stops only once the requests in flight have drained.
        check(events == ["LISTENING", "UNREADY", "NOT_ACCEPTING", "IN_FLIGHT_DRAINED",
                         "STOPPED_LISTENING", "EXIT"], f"retry-after: lifecycle {events}")
        # client-go's attempt after a 429 comes no sooner than Retry-After's 5 s.
        retried = wait_for("an agent request retried by client-go", lambda: [
            r for r in agent.rows() if int(r["retried"]) >= 1])
        check(float(retried[0]["latency_ms"]) >= 5000,
              f"retry-after: client-go waited out Retry-After ({retried[0]})")
    finally:
        if agent:
            agent.stop()
        s.stop()


def judge(agent):
    """The agent's requests, and those that failed."""
    rows = agent.rows()
    return rows, [r for r in rows if r["failed"] == "1"]


def case_agents(bin_dir, work):
    """A naive and a retrying agent through a shutdown, the apiserver gone, and its restart on the
    same port: no error during the delay; then errors; the naive agent Degraded (and recovered),
    the retrying one not. Then a retrying agent whose errors persist goes Degraded."""
    s1 = Server(bin_dir, work, "node-a", "--shutdown-delay-duration=2s")
    port, cert_dir = s1.port, s1.cert_dir
    agents = []
    s2 = None
    try:
        wait_for("/readyz 200", lambda: s1.request("/readyz")[0] == 200)
        agents = [Agent(bin_dir, work, "n-naive", port, cert_dir, "--policy=naive",
                        "--interval=250ms"),
                  # 30 s: far more than the restart takes even on a loaded machine.
                  Agent(bin_dir, work, "n-retry", port, cert_dir, "--policy=retry",
                        "--interval=250ms", "--degraded-after=30s")]
        for a in agents:
            wait_for("an agent's answers", lambda: len(a.rows()) >= 6)
        s1.sigterm()
        check(s1.wait() == 0, "agents: the first apiserver exited 0")
        for a in agents:
            wait_for("an agent's error", lambda: judge(a)[1])
        s2 = Server(bin_dir, work, "node-a-again", "--shutdown-delay-duration=2s", port=port,
                    cert_dir=cert_dir)
        for a in agents:
            wait_for("an agent's answer from the restarted apiserver", lambda: [
                r for r in a.rows() if r["backend"] == "node-a-again" and r["failed"] == "0"])
        naive, retry = agents
        for a in agents:
            check(a.stop() == 0, "agents: an agent stopped cleanly")
        unready, closing = s1.event_us("UNREADY"), s1.event_us("NOT_ACCEPTING")
        for a in agents:
            rows, failed = judge(a)
            in_delay = [r for r in rows if unready <= float(r["send_s"]) * 1e6 and
                        float(r["send_s"]) * 1e6 + float(r["latency_ms"]) * 1e3 < closing]
            name = os.path.basename(a.csv)
            check(len(in_delay) > 0 and not [r for r in in_delay if r["failed"] == "1"],
                  f"agents: {name}: {len(in_delay)} requests in the delay, none failed")
            check([r for r in rows if r["conn"] == "reused" and r["failed"] == "0"],
                  f"agents: {name}: kept-alive connection reused")
            print(f"FIGURES {name}: {len(rows)} requests, {len(failed)} failed: "
                  f"{sorted(set(r['error'] for r in failed))}", flush=True)
        words = naive.transition_words()
        check(words[:1] == ["DEGRADED"] and words[-1:] == ["RECOVERED"],
              f"agents: naive Degraded, then recovered ({words})")
        check(judge(retry)[1] and retry.transition_words() == [],
              f"agents: retry had errors but never Degraded ({retry.transition_words()})")
        s2.sigterm()
        check(s2.wait() == 0, "agents: the restarted apiserver exited 0")

        # Nothing listens on the port now: the retrying agent's errors persist.
        lasting = Agent(bin_dir, work, "n-lasting", port, cert_dir, "--policy=retry",
                        "--interval=250ms", "--degraded-after=1s")
        agents.append(lasting)
        wait_for("Degraded", lambda: lasting.transition_words())
        lasting.stop()
        rows, failed = judge(lasting)
        degraded_us = int(read_lines(lasting.transitions)[0][1])
        check(failed and rows == failed and
              degraded_us - float(failed[0]["send_s"]) * 1e6 >= 1e6 and
              lasting.transition_words() == ["DEGRADED"],
              "agents: retry Degraded once its errors lasted --degraded-after=1s")
    finally:
        for a in agents:
            if a.proc.poll() is None:
                a.stop()
        for s in (s1, s2):
            if s:
                s.stop()


def build_bin_dir(script, bin_dir):
    """(the binaries' directory, None): bin_dir, or what the script built or found; (None, the
    exit status) when it cannot build (77, a skip) or failed."""
    if bin_dir:
        return bin_dir, None
    started = time.monotonic()
    build = subprocess.run([script], stdout=subprocess.PIPE, text=True)
    if build.returncode == 77:
        return None, skip("scripts/realapi cannot build here (see above)")
    if build.returncode != 0:
        print(f"FAIL scripts/realapi exited {build.returncode}", file=sys.stderr)
        return None, 1
    print(f"FIGURES scripts/realapi: {time.monotonic() - started:.0f} s", flush=True)
    return build.stdout.strip().splitlines()[-1], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", help="scripts/realapi: builds the binaries or finds them")
    ap.add_argument("--bin-dir", help="the binaries, built already")
    args = ap.parse_args()
    bin_dir, status = build_bin_dir(args.script, args.bin_dir)
    if bin_dir is None:
        return status
    with tempfile.TemporaryDirectory(prefix="realapi-smoke.") as work:
        try:
            case_sigterm(case_startup_and_api(bin_dir, work))
            case_second_sigterm(bin_dir, work)
            case_retry_after(bin_dir, work)
            case_agents(bin_dir, work)
        except AssertionError as e:
            check(False, str(e))
        except Exception:  # a case that broke off: its traceback, and the logs below
            traceback.print_exc()
            check(False, "a case broke of")
        if failures:
            for dirpath, _, files in sorted(os.walk(work)):
                for name in sorted(f for f in files if not f.endswith((".crt", ".key"))):
                    path = os.path.join(dirpath, name)
                    with open(path, errors="replace") as f:
                        tail = f.read().splitlines()[-20:]
                    print(f"--- {os.path.relpath(path, work)}", *tail, sep="\n", file=sys.stderr)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
