#!/usr/bin/python3
"""yaml_differential.py DRIVER [--count N] [--seed S] [--save DIR]

Generates kubelet configs and static pod manifests in the YAML and JSON that people and tools
write (every YAML line break, comments, quoting, block and flow styles, document markers,
indentation) and compares what the shim reads of each (DRIVER: kubelet_files_dump, given them all
in one --batch) with what kubelet reads, worked out with PyYAML (python3-yaml) and json as
kubelet's decoding goes: a file whose first non-space character is '{' is JSON (Go's
encoding/json), anything else YAML turned into JSON (sigs.k8s.io/yaml), then Go structs: an int
field takes a JSON integer only (a YAML float that JSON writes as one too), a metav1.Duration a
string only (null included: it refuses ""), a string field a string, and null leaves the default.

A document passes when both read the same values, or both refuse it. The shim may refuse what
kubelet reads only for the refusals it documents (src/kubelet/yaml_document.hpp, src/kubelet/kubelet_shutdown.cpp);
each generated document carries the refusals it contains, and those are counted and printed. A
different value is always a failure, and so is a value where kubelet refuses.

PyYAML and go-yaml differ in places, and those forms are not generated: sexagesimal numbers
(1:30), 0o octal, y/n booleans, exponents without a dot (1e3), timestamps, tabs as separators.

Exit status: 0 pass, 1 a mismatch, 77 python3-yaml missing (a failure under CI=true)."""

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
from fractions import Fraction

try:
    import yaml
except ImportError:
    if os.environ.get("CI") == "true":
        print("yaml_differential: FAIL: python3-yaml is missing (CI=true: a skip is a failure)")
        sys.exit(1)
    print("yaml_differential: SKIP: python3-yaml is missing (scripts/deps.sh installs it)")
    sys.exit(77)

BREAKS = {"LF": "\n", "CR": "\r", "CRLF": "\r\n", "NEL": "\x85", "LS": "\u2028", "PS": "\u2029"}
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
MAX_GRACE = 86400  # the shim's bound on seconds, within kubelet's


class Refused(Exception):
    """kubelet refuses the file."""


# Go's unicode.IsSpace, which apimachinery's hasJSONPrefix trims before looking for '{'.
GO_SPACES = ("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
             "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

DURATION_UNITS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
                  "h": 3600 * 10**9}


def go_parse_duration(s):
    """Go's time.ParseDuration, for the forms generated here."""
    if s in ("0", "+0", "-0"):
        return 0
    m = re.fullmatch(r"([+-]?)((?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|ms|s|m|h))+)", s)
    if not m:
        raise Refused(f"duration {s!r}")
    total = Fraction(0)
    for number, unit in re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)", m.group(2)):
        total += Fraction(number) * DURATION_UNITS[unit]
    ns = int(total)
    return -ns if m.group(1) == "-" else ns


def check_jsonable(v):
    """sigs.k8s.io/yaml's YAML-to-JSON step: no infinity or NaN, string-able keys only."""
    if isinstance(v, float) and not math.isfinite(v):
        raise Refused("infinity or NaN")
    if isinstance(v, dict):
        for k, x in v.items():
            if k is None or (isinstance(k, int) and not isinstance(k, bool) and
                             not INT64[0] <= k <= INT64[1]):
                raise Refused(f"key {k!r}")
            check_jsonable(x)
    if isinstance(v, list):
        for x in v:
            check_jsonable(x)


def load(text):
    """The document as kubelet's decoding sees it, and whether it was read as JSON."""
    if text.lstrip(GO_SPACES).startswith("{"):
        def no_constant(name):
            raise Refused(name)
        try:
            return json.loads(text, parse_constant=no_constant), True
        except ValueError as e:
            raise Refused(f"JSON: {e}")
    try:
        docs = yaml.safe_load_all(text)
        first = next(docs, None)  # go-yaml reads the first document only
    except yaml.YAMLError as e:
        raise Refused(f"YAML: {e}")
    check_jsonable(first)
    return first, False


def int_field(v, bounds, is_json):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Refused(f"not a number: {v!r}")
    if isinstance(v, float):
        # JSON has no float for an int field; a YAML float is written out by encoding/json, as
        # an integer when it is one below 1e21.
        if is_json or not v.is_integer() or abs(v) >= 1e21:
            raise Refused(f"not an integer: {v!r}")
        v = int(v)
    if not bounds[0] <= v <= bounds[1]:
        raise Refused(f"out of range: {v}")
    return v


def duration_field(obj, key):
    if key not in obj:
        return 0
    v = obj[key]
    if not isinstance(v, str):  # null too: metav1.Duration's UnmarshalJSON parses ""
        raise Refused(f"{key}: not a string: {v!r}")
    return go_parse_duration(v)


def kubelet_reads(kind, text):
    """What kubelet reads, in kubelet_files_dump's form; raises Refused."""
    root, is_json = load(text)
    if not isinstance(root, dict):
        raise Refused("not a mapping")
    if kind == "config":
        if root.get("kind") != "KubeletConfiguration":
            raise Refused("kind")
        groups = []
        items = root.get("shutdownGracePeriodByPodPriority")
        if items is not None:
            if not isinstance(items, list):
                raise Refused("not a list")
            for item in items:
                if item is None:
                    item = {}
                if not isinstance(item, dict):
                    raise Refused("not a group")
                p, s = item.get("priority"), item.get("shutdownGracePeriodSeconds")
                groups.append([0 if p is None else int_field(p, INT32, is_json),
                               0 if s is None else int_field(s, INT64, is_json)])
        return {"grace_ns": duration_field(root, "shutdownGracePeriod"),
                "critical_ns": duration_field(root, "shutdownGracePeriodCriticalPods"),
                "groups": groups}
    if root.get("kind") != "Pod":
        raise Refused("kind")
    spec = root.get("spec")
    if not isinstance(spec, dict):
        raise Refused("no spec")
    p, c, t = spec.get("priority"), spec.get("priorityClassName"), spec.get(
        "terminationGracePeriodSeconds")
    if c is not None and not isinstance(c, str):
        raise Refused("priorityClassName")
    return {"priority": None if p is None else int_field(p, INT32, is_json),
            "priority_class_name": c or "",
            "termination_grace_seconds": None if t is None else int_field(t, INT64, is_json)}


# --- The generator -----------------------------------------------------------------------------
# A generated value is (text, refusals): the YAML (or JSON) as written and the documented
# refusals of the shim it brings.


class Doc:
    def __init__(self, rng):
        self.rng = rng
        self.refusals = set()
        self.features = set()
        self.json_floats = False

    def pick(self, *options):
        return self.rng.choice(options)


def int_value(d, typical, json_mode=False):
    """An integer field's value: mostly decimal, sometimes a form kubelet reads otherwise."""
    r = d.rng.random()
    n = d.pick(*typical)
    if json_mode:
        if r < 0.8:
            return str(n)
        v = d.pick("null", f"{n}.0", f"\"{n}\"", "true", f"{n}.0e+0")
        d.json_floats |= ".0" in v  # read as YAML, a float kubelet takes as an integer
        return v
    if r < 0.6:
        return str(n)
    if r < 0.7:
        return d.pick("", "~", "null", "Null", "NULL")
    if r < 0.85:
        d.refusals.add("number-form")
        # A leading 0 only before octal digits: "090" is a float to go-yaml, a string to PyYAML.
        octal = f"0{abs(n)}" if n and set(str(abs(n))) <= set("01234567") else "00"
        return d.pick(f"0x{abs(n):X}" if n >= 0 else f"-0x{-n:x}", f"+{abs(n)}",
                      f"{n:_}" if abs(n) >= 1000 else f"1_{abs(n)}", octal, f"{n}.0",
                      f"0b{abs(n):b}", f"{n}.0e+0")
    return d.pick(f"'{n}'", f"\"{n}\"", "high", "true", "yes", "Off", f"{n}.5", ".inf", "-.Inf",
                  ".nan", f"[{n}]", f"{{v: {n}}}", f"|\n{d.indent * 3}{n}")


DURATIONS = ["30s", "1m30s", "1500ms", "0s", "45s", "2h", "1h2m3s", "90s", "0.5s", "10s", "250ms"]


def duration_value(d, json_mode=False):
    v = d.pick(*DURATIONS)
    r = d.rng.random()
    if json_mode:
        if r < 0.85:
            return json.dumps(v)
        return d.pick("null", "30", "\"30\"", "true", "\"3O s\"")
    if r < 0.5:
        return v
    if r < 0.7:
        return d.pick(f"'{v}'", f"\"{v}\"", f"\"{v[:-1]}\\x{ord(v[-1]):02x}\"")
    if r < 0.8:
        return d.pick(f">-\n{d.indent * 3}{v}", f"|-\n{d.indent * 3}{v}", f"|\n{d.indent * 3}{v}")
    v = d.pick("", "~", "null", "0", "30", "true", "'0'", "-5s", "3O s", f"[{v}]")
    if v == "-5s":
        d.refusals.add("bounds")  # no negative duration for the shim, nor kubelet's validation
    return v


CLASS_NAMES = ["system-node-critical", "system-cluster-critical", "high-priority", ""]


def string_value(d, json_mode=False, multiline_ok=True):
    v = d.pick(*CLASS_NAMES)
    r = d.rng.random()
    if json_mode:
        if r < 0.7:
            return json.dumps(v)
        return d.pick(json.dumps(v + "\u2028x", ensure_ascii=d.rng.random() < 0.5),
                      json.dumps(v + "\n\x85\t\"\\"), "\"a\\/b\"", "5", "true", "null",
                      "\"caf\\u00e9\"")
    if r < 0.45:
        return v if v else "''"
    if r < 0.6:
        return d.pick(f"'{v}'", f"\"{v}\"", f"'{v}''s'", f"\"{v} # not a comment\"")
    if r < 0.75:
        # Escaped line breaks inside quotes are characters, not breaks.
        return d.pick(f"\"{v}\\n2\"", f"\"{v}\\u2028x\"", f"\"{v}\\x85y\"", f"\"{v}\\L\\P\\N\"",
                      f"\"{v}\\t\\\"q\\\"\"", f"\"caf\\u00e9 {v}\"", f"\"a\\\\/b\"")
    if r < 0.85 and multiline_ok:
        # A line break inside quotes folds as YAML 1.1 says (LS and PS are kept).
        br = d.pick(*BREAKS.values())
        q = d.pick("'", "\"")
        return f"{q}{v}{br}{d.indent * 3}next{q}"
    if r < 0.92 and multiline_ok:
        return d.pick(f"|-\n{d.indent * 3}{v}", f">-\n{d.indent * 3}{v}\n{d.indent * 3}more",
                      f"|\n{d.indent * 3}{v}")
    return d.pick("5", "true", "no", "~", "null", "3.5", "0x10", "[a, b]")


def key(d, name, json_mode=False):
    if json_mode:
        return json.dumps(name) if d.rng.random() < 0.9 else "\"" + name[:-1] + "\\u%04x\"" % ord(
            name[-1])
    r = d.rng.random()
    if r < 0.8:
        return name
    return d.pick(f"'{name}'", f"\"{name}\"", f"\"{name[:-1]}\\x{ord(name[-1]):02x}\"")


def comment(d):
    return d.pick("# a comment", "#", "# key: 5", "#: colon")


def yaml_doc(d, kind):
    """Lines of a block-style document (flow collections inside); returns a list of (indent,
    text) with None for a line break to choose later."""
    i = d.indent
    lines = []
    if d.rng.random() < 0.1:
        lines.append("%YAML 1.1")
        d.refusals.add("directive")
        lines.append("---")
    elif d.rng.random() < 0.3:
        lines.append(d.pick("---", "--- # start", "--- "))
    if d.rng.random() < 0.2:
        lines.append(comment(d))
    if kind == "config":
        lines.append(f"{key(d, 'apiVersion')}: kubelet.config.k8s.io/v1beta1")
        lines.append(f"{key(d, 'kind')}: " +
                     d.pick("KubeletConfiguration", "'KubeletConfiguration'",
                            "\"Kubelet\\x43onfiguration\""))
        fields = []
        written = set()
        for name in ("shutdownGracePeriod", "shutdownGracePeriodCriticalPods"):
            if d.rng.random() < 0.85:
                written.add(name)
                v = duration_value(d)
                tail = f" {comment(d)}" if d.rng.random() < 0.2 and "\n" not in v else ""
                fields.append([f"{key(d, name)}: {v}{tail}"])
        if d.rng.random() < 0.6:
            fields.append(groups_yaml(d))
        fields.append(["cgroupDriver: systemd", "clusterDNS:", f"{i}- 10.96.0.10"
                       if d.rng.random() < 0.5 else "- 10.96.0.10", "url: http://x:8080/#a"])
        d.rng.shuffle(fields)
        if d.rng.random() < 0.08 and "shutdownGracePeriod" in written:
            d.refusals.add("dup")
            fields.append([f"shutdownGracePeriod: {d.pick(*DURATIONS)}"])
        for f in fields:
            lines.extend(f)
    else:
        lines.append(f"{key(d, 'apiVersion')}: v1")
        lines.append(f"{key(d, 'kind')}: " + d.pick("Pod", "'Pod'", "\"P\\x6fd\"", "|-\n  Pod"))
        lines.append("metadata:" + (f" {comment(d)}" if d.rng.random() < 0.2 else ""))
        lines.append(f"{i}name: kube-apiserver")
        lines.append(f"{i}annotations:")
        # Annotations are strings to kubelet (map[string]string): any other type is refused.
        lines.append(f"{i}{i}note: " + d.pick("'5'", "\"x\\u2028y\"", "http://x:1/#y",
                                               "\"caf\\u00e9\"", "a#b", "'it''s'", "\"\"",
                                               f"|\n{i * 3}two\n{i * 3}lines"))
        if d.rng.random() < 0.1:
            lines.append(f"{i}priority: 7")  # not the spec's
        if d.rng.random() < 0.25:
            lines.extend(spec_flow(d))
        else:
            lines.extend(spec_block(d))
    if d.rng.random() < 0.15:
        lines.append(comment(d))
    if d.rng.random() < 0.1:
        lines.append("...")
    if d.rng.random() < 0.05:
        d.refusals.add("second-doc")
        lines.append("---")
        lines.append("kind: Other")
    return lines


def groups_yaml(d):
    i = d.indent
    out = [f"{key(d, 'shutdownGracePeriodByPodPriority')}:" +
           (f" {comment(d)}" if d.rng.random() < 0.2 else "")]
    n = d.pick(0, 1, 2, 3)
    style = d.pick("block", "indented", "flow", "flow-lines")
    priorities = (0, 1000, 2000000000, 2000001000, -5, 2147483647)
    seconds = (0, 5, 10, 30, 90, 86400)
    if style.startswith("flow"):
        items = []
        for _ in range(n):
            if d.rng.random() < 0.1:
                items.append(d.pick("null", "~"))
                continue
            p, s = int_value(d, priorities), int_value(d, seconds)
            if "\n" in p or "\n" in s or p.startswith(("[", "{")) or s.startswith(("[", "{")):
                p, s = "0", "1"
            items.append(f"{{{key(d, 'priority')}: {p}, "
                         f"{key(d, 'shutdownGracePeriodSeconds')}: {s}}}")
        if style == "flow":
            out[0] += " [" + ", ".join(items) + "]"
        else:
            out[0] += " ["
            for k, it in enumerate(items):
                out.append(f"{i}{it}" + ("," if k + 1 < len(items) else ""))
            out.append(f"{i}]")
        return out
    pad = i if style == "indented" else ""
    for _ in range(n):
        if d.rng.random() < 0.1:
            out.append(f"{pad}- {d.pick('', '~', 'null')}".rstrip())
            continue
        entries = []
        if d.rng.random() < 0.9:
            entries.append(f"{key(d, 'priority')}: {int_value(d, priorities)}")
        if d.rng.random() < 0.9:
            entries.append(f"{key(d, 'shutdownGracePeriodSeconds')}: {int_value(d, seconds)}")
        if not entries:
            out.append(f"{pad}- {{}}")
            continue
        d.rng.shuffle(entries)
        sub = pad + " " * 2
        first, rest = entries[0], entries[1:]
        out.append(f"{pad}- {fix_block(first, sub)}")
        for e in rest:
            out.append(f"{sub}{fix_block(e, sub)}")
    return out


def fix_block(entry, indent):
    """A block scalar's continuation lines under a list item's key."""
    return entry.replace("\n", "\n" + indent)


def spec_block(d):
    i = d.indent
    out = ["spec:" + (f" {comment(d)}" if d.rng.random() < 0.25 else "")]
    fields = [[f"{i}containers:",
               f"{i}- command:" if d.rng.random() < 0.5 else f"{i}{i}- command:"]]
    c = fields[0]
    pad = i if c[1].startswith(i + i) else ""
    c += [f"{i}{pad}  - kube-apiserver", f"{i}{pad}  - --shutdown-delay-duration=70s",
          f"{i}{pad}  image: registry.k8s.io/kube-apiserver:v1.35.0",
          f"{i}{pad}  name: kube-apiserver"]
    fields.append([f"{i}hostNetwork: true"])
    priorities = (0, 1000, 2000000000, 2000001000, -5, 2147483647, -2147483648)
    seconds = (0, 30, 90, 86400)
    if d.rng.random() < 0.85:
        v = int_value(d, priorities).replace("\n", "\n" + i)
        fields.append([f"{i}{key(d, 'priority')}: {v}" +
                       (f" {comment(d)}" if d.rng.random() < 0.2 and "\n" not in v else "")])
    if d.rng.random() < 0.7:
        v = string_value(d).replace("\n", "\n" + i)
        fields.append([f"{i}{key(d, 'priorityClassName')}: {v}"])
    if d.rng.random() < 0.6:
        v = int_value(d, seconds).replace("\n", "\n" + i)
        fields.append([f"{i}{key(d, 'terminationGracePeriodSeconds')}: {v}"])
    has_priority = any("priority" in f[0] and "Class" not in f[0] for f in fields)
    d.rng.shuffle(fields)
    if d.rng.random() < 0.06 and has_priority:
        d.refusals.add("dup")
        fields.append([f"{i}priority: 2000001000"])
    if d.rng.random() < 0.05:
        d.refusals.add("alias")
        fields = [[f"{i}x: &p 5"]] + fields + [[f"{i}y: *p"]]
    if d.rng.random() < 0.04:
        d.refusals.add("tag")
        fields.append([f"{i}z: !!str 5"])
    if d.rng.random() < 0.04:
        d.refusals.add("merge")
        fields.append([f"{i}<<: {{w: 1}}"])
    for f in fields:
        out.extend(f)
    return out


def spec_flow(d):
    parts = ["containers: [{name: kube-apiserver, command: [kube-apiserver]}]"]
    if d.rng.random() < 0.85:
        v = int_value(d, (0, 2000001000, -5))
        if "\n" not in v:
            parts.append(f"{key(d, 'priority')}: {v}")
    if d.rng.random() < 0.7:
        v = string_value(d, multiline_ok=False)
        if "\n" not in v and not v.startswith(("|", ">")):
            parts.append(f"{key(d, 'priorityClassName')}: {v}")
    if d.rng.random() < 0.6:
        v = int_value(d, (30, 90))
        if "\n" not in v:
            parts.append(f"{key(d, 'terminationGracePeriodSeconds')}: {v}")
    d.rng.shuffle(parts)
    if d.rng.random() < 0.5:
        return ["spec: {" + ", ".join(parts) + "}"]
    # Across lines: in a flow collection the indentation does not matter, but it must be more
    # than the key's.
    out = ["spec: {"]
    for k, p in enumerate(parts):
        out.append(d.indent + p + ("," if k + 1 < len(parts) else ""))
    out.append(d.indent + "}")
    return out


def join(d, lines):
    mode = d.pick("uniform", "uniform", "mixed", "one-odd")
    text = ""
    names = list(BREAKS)
    uniform = d.pick(*names)
    odd = d.rng.randrange(len(lines))
    for k, line in enumerate(lines):
        if mode == "uniform":
            br = uniform
        elif mode == "mixed":
            br = d.pick(*names)
        else:
            br = names[d.rng.randrange(1, len(names))] if k == odd else "LF"
        d.features.add(br)
        text += line.replace("\n", BREAKS[br]) + BREAKS[br]
    return text


def json_doc(d, kind):
    """JSON as tools write it, with its own variants."""
    d.features.add("json")
    members = []
    if kind == "config":
        members.append((key(d, "kind", True), json.dumps("KubeletConfiguration")))
        members.append((key(d, "apiVersion", True), json.dumps("kubelet.config.k8s.io/v1beta1")))
        for name in ("shutdownGracePeriod", "shutdownGracePeriodCriticalPods"):
            if d.rng.random() < 0.85:
                members.append((key(d, name, True), duration_value(d, True)))
        if d.rng.random() < 0.6:
            items = []
            for _ in range(d.pick(0, 1, 2)):
                if d.rng.random() < 0.1:
                    items.append("null")
                    continue
                items.append("{" + f"{key(d, 'priority', True)}: "
                             f"{int_value(d, (0, 2000001000), True)}, "
                             f"{key(d, 'shutdownGracePeriodSeconds', True)}: "
                             f"{int_value(d, (5, 90), True)}" + "}")
            members.append((key(d, "shutdownGracePeriodByPodPriority", True),
                            "[" + ", ".join(items) + "]"))
    else:
        members.append((key(d, "kind", True), json.dumps("Pod")))
        members.append((key(d, "apiVersion", True), json.dumps("v1")))
        spec = [("\"containers\"", "[{\"name\": \"kube-apiserver\", \"image\": \"k8s.io/a:1\"}]")]
        if d.rng.random() < 0.85:
            spec.append((key(d, "priority", True), int_value(d, (0, 2000001000, -5), True)))
        if d.rng.random() < 0.7:
            v = string_value(d, True)
            if "\u2028" in v or "\x85" in v:
                d.refusals.add("json-raw-break")
            spec.append((key(d, "priorityClassName", True), v))
        if d.rng.random() < 0.6:
            spec.append((key(d, "terminationGracePeriodSeconds", True),
                         int_value(d, (30, 90), True)))
        if d.rng.random() < 0.05:
            d.refusals.add("dup")
            spec.append(("\"priority\"", "5"))
        members.append(("\"spec\"", spec))
    pretty = d.rng.random() < 0.6
    ind = d.pick("  ", "    ", "\t")
    nl = d.pick("\n", "\r\n")

    def obj(ms, depth):
        parts = []
        for k, v in ms:
            if isinstance(v, list):
                v = obj(v, depth + 1)
            parts.append(f"{k}: {v}" if pretty or d.rng.random() < 0.5 else f"{k}:{v}")
        if not pretty:
            return "{" + ",".join(parts) + "}"
        pad = nl + ind * (depth + 1)
        return "{" + pad + ("," + pad).join(parts) + nl + ind * depth + "}"

    text = obj(members, 0)
    r = d.rng.random()
    if r < 0.1:
        text = d.pick(" ", "\n", "\r\n\t ", "\u2028") + text + d.pick("\n", " \n", "\n\t\n")
    elif r < 0.15:
        # YAML around it makes it YAML again (go-yaml then reads the flow mapping).
        d.features.add("json-as-yaml")
        text = d.pick("# c\n", "---\n") + text.replace("\t", "  ") + "\n"
        if "\\/" in text:
            d.refusals.add("escaped-slash")
        if d.json_floats:
            d.refusals.add("number-form")
        if any(c in text for c in "\u2028\x85"):
            d.refusals.discard("json-raw-break")
    elif r < 0.2:
        text += d.pick(",", " x", "}", "\n# c\n")  # not JSON: kubelet refuses
    return text


def yaml_top_flow(d, kind):
    """A whole document as a YAML flow mapping: kubelet reads it as JSON and refuses it."""
    d.features.add("yaml-flow-top")
    if kind == "config":
        return "{kind: KubeletConfiguration, shutdownGracePeriod: 30s}\n"
    return "{kind: Pod, spec: {priority: 2000001000}}\n"


def generate(rng):
    d = Doc(rng)
    d.indent = rng.choice(["  ", "  ", "    ", " "])
    kind = rng.choice(["config", "manifest"])
    r = rng.random()
    if r < 0.15:
        return kind, json_doc(d, kind), d
    if r < 0.17:
        return kind, yaml_top_flow(d, kind), d
    lines = yaml_doc(d, kind)
    text = join(d, lines)
    if "\\/" in text:
        d.refusals.add("escaped-slash")
    return kind, text, d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("--count", type=int,
                    default=int(os.environ.get("YAML_DIFFERENTIAL_COUNT", 3000)))
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--save", help="write each document and both readings into this directory")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    failures, refusals, outcomes, features = [], {}, {}, {}
    docs = [generate(rng) for _ in range(args.count)]
    batch = b"".join(f"{kind} {len(t.encode('utf-8'))}\n".encode() + t.encode("utf-8")
                     for kind, t, _ in docs)
    run = subprocess.run([args.driver, "--batch"], input=batch, capture_output=True, timeout=250)
    lines = run.stdout.decode("utf-8").split("\n")[:-1]  # not splitlines(): LS is in the values
    if run.returncode != 0 or len(lines) != len(docs):
        print(f"yaml_differential: FAIL: the driver exited {run.returncode} after {len(lines)} of "
              f"{len(docs)} documents: {run.stderr[-2000:]!r}")
        return 1
    for n, ((kind, text, d), line) in enumerate(zip(docs, lines)):
        for f in d.features:
            features[f] = features.get(f, 0) + 1
        try:
            want = kubelet_reads(kind, text)
        except Refused as e:
            want = {"error": str(e)}
        got = json.loads(line)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, f"{n:05d}.{kind}"), "wb") as f:
                f.write(text.encode("utf-8"))
            with open(os.path.join(args.save, f"{n:05d}.{kind}.json"), "w") as f:
                json.dump({"kubelet": want, "shim": got, "refusals": sorted(d.refusals)}, f)
        if "error" in want and "error" in got:
            outcome = "both refuse"
        elif "error" in got:
            if not d.refusals:
                failures.append((n, kind, text, want, got))
                continue
            for r in d.refusals:
                refusals[r] = refusals.get(r, 0) + 1
            outcome = "the shim refuses (documented)"
        elif "error" in want or got != want:
            failures.append((n, kind, text, want, got))
            continue
        else:
            outcome = "same values"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"yaml_differential: {args.count} documents compared (seed {args.seed}): " +
          ", ".join(f"{v} {k}" for k, v in sorted(outcomes.items())))
    print("  line breaks and styles: " + ", ".join(f"{k} {v}" for k, v in sorted(features.items())))
    print("  documented refusals where kubelet reads a value: " +
          (", ".join(f"{k} {v}" for k, v in sorted(refusals.items())) or "none"))
    for n, kind, text, want, got in failures[:10]:
        print(f"MISMATCH #{n} ({kind}): {text!r}\n  kubelet: {want}\n  shim:    {got}")
    if failures:
        print(f"yaml_differential: FAIL: {len(failures)} of {args.count} documents differ")
        return 1
    print("yaml_differential: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
