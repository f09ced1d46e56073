#!/usr/bin/env python3
"""Draws a trace a generated program wrote with --trace FILE as an SVG timeline.

    python3 tools/trace_svg.py TRACE.json -o timeline.svg [--iteration N] [--width PX]

One band per rank, top to bottom; in each, a compute lane (one box per node,
coloured by op kind; a reshard's copies in dark grey; waits in red) and the communication lanes under it (one
box per collective from its start to its completion, coloured by kind). Time
runs left to right over one forward pass (by default the last). Hovering a box
shows its name, op or kind, and duration. Standard library only, so anyone can
draw a trace without installing anything.
"""
import argparse
import json
import sys
from xml.sax.saxutils import escape

OP_COLOURS = ["#4e79a7", "#59a14f", "#9c755f", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#bab0ac",
              "#86bcb6", "#8cd17d", "#d4a6c8", "#a0cbe8"]
COMM_COLOURS = {"all-reduce": "#f28e2b", "all-gather": "#e8a33b", "reduce-scatter": "#d37295",
                "all-to-all": "#b6992d", "send": "#79706e", "receive": "#a5a5a5"}
WAIT = "#e15759"
COPY = "#555555"  # a reshard's pack, unpack or local slice
LANE, GAP, LEFT, TOP = 16, 10, 80, 40


def lanes_of(events):
    """rank -> {lane: [events]}; lane 0 is compute, 1.. communication."""
    out = {}
    for e in events:
        out.setdefault(e["pid"], {}).setdefault(e["tid"], []).append(e)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--iteration", type=int, help="the forward pass to draw (default: the last)")
    ap.add_argument("--width", type=int, default=1200)
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("trace_svg: %s: %s" % (a.trace, e))
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    iters = sorted({e["args"]["iteration"] for e in ev if e.get("cat") == "step"})
    if not iters:
        sys.exit("trace_svg: %s: no forward pass in the trace" % a.trace)
    it = iters[-1] if a.iteration is None else a.iteration
    if it not in iters:
        sys.exit("trace_svg: --iteration %d: the trace has passes %d to %d" % (it, iters[0], iters[-1]))
    ev = [e for e in ev if e["args"].get("iteration") == it]
    t0 = min(e["ts"] for e in ev)
    t1 = max(e["ts"] + e["dur"] for e in ev)
    span = max(t1 - t0, 1e-3)
    px = (a.width - LEFT - 20) / span
    ops = sorted({e["args"]["op"] for e in ev if e["cat"] == "node"})
    colour = {op: OP_COLOURS[i % len(OP_COLOURS)] for i, op in enumerate(ops)}
    ranks = lanes_of([e for e in ev if e["cat"] != "step"])
    body, y = [], TOP
    for r in sorted(ranks):
        lanes = ranks[r]
        ncomm = max([t for t in lanes if t > 0] or [0])
        body.append('<text x="%d" y="%d" class="rank">%s</text>' % (LEFT, y + 11, escape(names.get(r, "rank %d" % r))))
        y += 15
        for lane in range(0, ncomm + 1):
            ly = y + lane * (LANE + 2)
            body.append('<text x="%d" y="%d" class="lane">%s</text>'
                        % (LEFT - 6, ly + 12, "compute" if lane == 0 else "comm" if lane == 1 else ""))
            body.append('<rect x="%d" y="%d" width="%d" height="%d" class="bg"/>' % (LEFT, ly, a.width - LEFT - 20, LANE))
            for e in lanes.get(lane, []):
                x, w = LEFT + (e["ts"] - t0) * px, max(e["dur"] * px, 0.5)
                if e["cat"] == "node":
                    fill, tip = colour[e["args"]["op"]], "%s (%s %s)" % (e["name"], e["args"]["op"], e["args"]["shape"])
                elif e["cat"] == "wait":
                    fill, tip = WAIT, e["name"]
                elif e["cat"] == "copy":
                    fill, tip = COPY, e["name"]
                else:
                    fill = COMM_COLOURS.get(e["args"]["kind"], "#f28e2b")
                    tip = "%s, %d bytes, completed %s" % (e["name"], e["args"]["bytes"], e["args"].get("completed", ""))
                body.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s: %.1f us</title></rect>'
                            % (x, ly, w, LANE, fill, escape(tip), e["dur"]))
        y += (ncomm + 1) * (LANE + 2) + GAP
    # Time axis: about eight round ticks.
    step = 10 ** len(str(int(span / 8))) / 10 if span >= 8 else 1
    while span / step > 10:
        step *= 2
    axis, t = [], 0.0
    while t <= span:
        x = LEFT + t * px
        axis.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="tick"/>' % (x, TOP - 4, x, y - GAP))
        axis.append('<text x="%.1f" y="%d" class="axis">%s</text>'
                    % (x, TOP - 8, "%.3g ms" % (t / 1e3) if step >= 100 else "%.0f us" % t))
        t += step
    legend, lx = [], LEFT
    copies = [("reshard copy", COPY)] if any(e["cat"] == "copy" for e in ev) else []
    for name, fill in [(op, colour[op]) for op in ops] + copies + [("wait", WAIT)] + \
            sorted({(e["args"]["kind"], COMM_COLOURS.get(e["args"]["kind"], "#f28e2b")) for e in ev if e["cat"] == "comm"}):
        if lx + 8 * len(name) + 24 > a.width:
            lx, y = LEFT, y + 16
        legend.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" class="lane" '
                      'style="text-anchor:start">%s</text>' % (lx, y + 2, fill, lx + 14, y + 11, escape(name)))
        lx += 8 * len(name) + 28
    height = y + 24
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">'
           % (a.width, height, a.width, height),
           '<style>.rank{font-size:12px;font-weight:bold}.lane{font-size:10px;text-anchor:end;fill:#555}'
           '.axis{font-size:10px;text-anchor:middle;fill:#555}.tick{stroke:#ddd}.bg{fill:#f6f6f6}</style>',
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="8" y="14" class="rank">%s: forward pass %d, %.3f ms, --comms %s</text>'
           % (escape(a.trace.split("/")[-1]), it, span / 1e3, escape(d.get("otherData", {}).get("comms", "?")))]
    svg += axis + body + legend + ["</svg>"]
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(svg) + "\n")
    import os
    os.replace(tmp, a.output)


if __name__ == "__main__":
    main()
