#!/usr/bin/env python3
"""Summarises a trace a generated program wrote with --trace FILE.

    python3 tools/trace_report.py TRACE.json [--serial SERIAL.json] [--json]

Per forward pass (the first, a warm-up, is left out when there are more),
averaged over the passes and the ranks:
  - the time per op kind, and its share of the step (where the time goes);
  - each collective kind: count, bytes, time in flight (start to the
    completion the rank saw), time exposed (the rank blocked in its wait);
  - of the time exposed, how much went waiting for a peer that had not yet
    started the collective (load imbalance between ranks: it would be there
    with an infinitely fast link) and how much after every rank of the
    group had started it (the transfer itself, what overlap can hide). The
    ranks share one clock when they share a machine; across machines the
    split is as good as the clocks' agreement;
  - communication hidden behind compute. Taken from one trace this is
    1 - exposed / in flight, which overstates it when MPI only moves a
    collective inside its own calls (it is "in flight" but idle). With
    --serial, a trace of the same program run with --comms serial (every
    collective waited for as soon as it starts, so its whole time is
    exposed), it is 1 - exposed / exposed-when-serial: the share of the
    communication time the overlap actually removed from the step.

Standard library only; --json prints the numbers for scripts (make bench).
"""
import argparse
import collections
import json
import re
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    return d.get("otherData", {}), [e for e in d["traceEvents"] if e.get("ph") == "X"], \
        {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}


def coords(name):
    """{axis: index} from a process name such as 'rank 3 (dp=1 tp=1)'."""
    m = re.search(r"\(([^)]*)\)", name)
    return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv) if m else {}


def group_starts(events, names):
    """(comm, iteration, group) -> the last start among the ranks of the group,
    where the group of a collective over axes A is the ranks that agree on
    every other axis. Point-to-point transfers (a peer, not axes) are left out."""
    where = {pid: coords(n) for pid, n in names.items()}
    last = {}
    for e in events:
        a = e.get("args", {})
        if e.get("cat") != "comm" or "axes" not in a or a["kind"] in ("send", "receive"):
            continue
        key = group_key(e, where)
        last[key] = max(last.get(key, e["ts"]), e["ts"])
    return last, where


def group_key(e, where):
    """A collective span's or wait's (comm, iteration, the rank's coordinates off its axes)."""
    a = e["args"]
    axes = set(a.get("axes", "").replace("+", ",").split(","))
    return (a["comm"], a["iteration"], tuple(sorted((k, v) for k, v in where.get(e["pid"], {}).items()
                                                    if k not in axes)))


def summarise(path):
    meta, events, names = load(path)
    last, where = group_starts(events, names)
    iters = sorted({e["args"]["iteration"] for e in events if e.get("cat") == "step"})
    keep = set(iters[1:] if len(iters) > 1 else iters)
    ranks = sorted({e["pid"] for e in events})
    n = max(1, len(keep)) * max(1, len(ranks))  # rank-passes averaged over
    ops = collections.defaultdict(float)
    kinds = collections.defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])  # count, bytes, flight, exposed, peer wait (us)
    step = collections.defaultdict(list)  # rank -> step durations
    flight = exposed = peers = 0.0
    for e in events:
        a = e.get("args", {})
        if a.get("iteration") not in keep:
            continue
        cat = e.get("cat")
        if cat == "step":
            step[e["pid"]].append(e["dur"])
        elif cat == "node":
            ops[a["op"]] += e["dur"]
        elif cat == "copy":  # a reshard's pack, unpack or local slice: compute, but no node's
            ops["(reshard copies)"] += e["dur"]
        elif cat == "comm":
            k = kinds[a["kind"]]
            k[0] += 1
            k[1] += a["bytes"]
            k[2] += e["dur"]
            flight += e["dur"]
        elif cat == "wait":
            kinds[a["kind"]][3] += e["dur"]
            exposed += e["dur"]
            key = group_key(e, where)
            if key in last:  # the part before the group's last rank started it
                w = max(0.0, min(e["ts"] + e["dur"], last[key]) - e["ts"])
                kinds[a["kind"]][4] += w
                peers += w
    step_us = max(sum(v) / len(v) for v in step.values()) if step else 0.0
    return {
        "file": path,
        "comms": meta.get("comms", "?"),
        "ranks": len(ranks),
        "iterations": len(keep),
        "step_ms": step_us / 1e3,
        "compute_ms": sum(ops.values()) / n / 1e3,
        "ops": {k: v / n / 1e3 for k, v in ops.items()},
        "kinds": {k: {"count": v[0] / n, "bytes": v[1] / n, "flight_ms": v[2] / n / 1e3, "exposed_ms": v[3] / n / 1e3,
                      "peer_wait_ms": v[4] / n / 1e3, "transfer_exposed_ms": (v[3] - v[4]) / n / 1e3}
                  for k, v in kinds.items()},
        "flight_ms": flight / n / 1e3,
        "exposed_ms": exposed / n / 1e3,
        "peer_wait_ms": peers / n / 1e3,
        "transfer_exposed_ms": (exposed - peers) / n / 1e3,
    }


def hidden(s, serial=None, key="exposed_ms"):
    """The share of communication hidden: against a serial run if given.
    key "transfer_exposed_ms" counts only the waits after every rank of the
    group had started (waiting for a late peer is imbalance, not transfer)."""
    base = serial[key] if serial else s["flight_ms"]
    return max(0.0, 1.0 - s[key] / base) if base > 0 else None


def load_summary(path):
    try:
        return summarise(path)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("trace_report: %s: %s" % (path, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--serial", help="a trace of the same program run with --comms serial")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    a = ap.parse_args()
    s = load_summary(a.trace)
    serial = load_summary(a.serial) if a.serial else None
    s["hidden"] = hidden(s, serial)
    s["hidden_transfer"] = hidden(s, serial, "transfer_exposed_ms")
    s["hidden_basis"] = "serial run" if serial else "time in flight"
    if serial:
        s["serial_exposed_ms"] = serial["exposed_ms"]
        s["serial_step_ms"] = serial["step_ms"]
    if a.json:
        json.dump(s, sys.stdout, indent=1, sort_keys=True)
        print()
        return
    print("%s: %d ranks, %d passes (--comms %s), step %.3f ms, compute %.3f ms per rank"
          % (a.trace, s["ranks"], s["iterations"], s["comms"], s["step_ms"], s["compute_ms"]))
    print("\n%-28s %10s %7s" % ("op", "ms/pass", "share"))
    for op, ms in sorted(s["ops"].items(), key=lambda kv: -kv[1]):
        print("%-28s %10.3f %6.1f%%" % (op, ms, 100 * ms / s["step_ms"] if s["step_ms"] else 0))
    if s["kinds"]:
        print("\n%-16s %7s %12s %12s %12s %12s %12s" % ("collective", "count", "bytes", "flight ms", "exposed ms",
                                                        "peer wait", "transfer"))
        for k, v in sorted(s["kinds"].items()):
            print("%-16s %7.1f %12.0f %12.3f %12.3f %12.3f %12.3f" % (k, v["count"], v["bytes"], v["flight_ms"],
                                                                  v["exposed_ms"], v["peer_wait_ms"],
                                                                  v["transfer_exposed_ms"]))
        pct = lambda h: "n/a" if h is None else "%.0f%%" % (100 * h)  # noqa: E731
        print("\ncommunication hidden behind compute: %s of the time exposed, %s of the transfer (%s%s)"
              % (pct(s["hidden"]), pct(s["hidden_transfer"]), s["hidden_basis"],
                 ": %.3f ms exposed (%.3f ms of it transfer), %.3f ms (%.3f) when serial"
                 % (s["exposed_ms"], s["transfer_exposed_ms"], serial["exposed_ms"], serial["transfer_exposed_ms"])
                 if serial else ""))


if __name__ == "__main__":
    main()
