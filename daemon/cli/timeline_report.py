"""syncctl report: a self-contained HTML page of plots from a syncd timeline (Chrome trace JSON).

    timeline_report.py TIMELINE.json -o report.html

Plots (inline SVG, drawn with matplotlib; the page needs nothing else):
  - step time over time: a step is one occurrence of the reference tensor (the name submitted most
    often, the earliest-submitted among equals) on node 0, from one first submission to the next;
  - per-rank lateness heat map: for each step, how long after the step's first submitter each rank
    submitted the reference tensor (node 0's clock: other nodes' events are already shifted);
  - time per stage: each node's tensors' phases (WAIT_FOR_RANKS, NEGOTIATE, QUEUE, EXECUTE), per step;
  - top tensors by wait: the names whose WAIT_FOR_RANKS plus NEGOTIATE is longest, per occurrence;
  - the timeline itself over the last steps, lane by lane as Perfetto shows it: each rank's
    submissions, each node's tensors in their phases, and the daemons' execution and network work.
Exit status 1 with a message naming the file when it is not a syncd timeline.
"""
import argparse
import collections
import html
import io
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ("WAIT_FOR_RANKS", "NEGOTIATE", "QUEUE", "EXECUTE")
COLORS = {"WAIT_FOR_RANKS": "#d62728", "NEGOTIATE": "#ff7f0e", "QUEUE": "#bcbd22", "EXECUTE": "#1f77b4"}


def load(path):
    """The trace's events: one JSON object per line as syncd writes them (large files stream), or any
    Chrome trace (a JSON array, or an object with traceEvents)."""
    events = []
    with open(path) as f:
        first = f.readline().strip()
        if first == "[":
            for line in f:
                line = line.strip().rstrip(",")
                if line and line != "]":
                    events.append(json.loads(line))
            return events
        f.seek(0)
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


class Timeline:
    def __init__(self, events):
        self.nodes = {}
        self.threads = {}
        self.tensors = []  # (node, name, begin us, end us, args, {phase: us})
        self.submits = collections.defaultdict(list)  # (rank, tensor) -> [(ts, node)]
        self.clocks = {}
        self.spans = []  # (node, thread name, name, ts, dur): the daemons' stages
        open_tensors, open_phases = {}, {}
        phases = collections.defaultdict(dict)
        for e in events:
            ph, name = e.get("ph"), e.get("name", "")
            if ph == "M" and name == "process_name":
                self.nodes[e["pid"]] = e["args"]["name"]
            elif ph == "M" and name == "thread_name":
                self.threads[(e["pid"], e["tid"])] = e["args"]["name"]
            elif ph == "i" and name.startswith("submit "):
                self.submits[(e["tid"], name[len("submit "):])].append((e["ts"], e["pid"]))
            elif ph == "X":
                self.spans.append((e["pid"], e["tid"], name, e["ts"], e.get("dur", 0)))
            elif ph == "i" and name == "clock sync":
                self.clocks[e["pid"]] = (e["args"]["offset_us"], e["args"]["error_bound_us"])
            elif ph in ("b", "e") and e.get("cat") == "tensor":
                key = (e["pid"], e["id"])
                if name in PHASES:
                    if ph == "b":
                        open_phases[(key, name)] = e["ts"]
                    elif (key, name) in open_phases:
                        phases[key][name] = e["ts"] - open_phases.pop((key, name))
                elif ph == "b":
                    open_tensors[key] = (name, e["ts"], e.get("args", {}))
                elif key in open_tensors:
                    tname, begin, args = open_tensors.pop(key)
                    self.tensors.append((e["pid"], tname, begin, e["ts"], args, phases.pop(key, {})))
        if not self.tensors and not self.submits:
            raise ValueError("no syncd tensor events in it (is it a syncd timeline?)")
        self.ranks = sorted({r for r, _ in self.submits})
        self.reference = self._reference()
        self.steps = sorted(b for node, name, b, _, _, _ in self.tensors if node == min(self.nodes or [0]) and name == self.reference)

    def _reference(self):
        counts = collections.Counter(name for _, name, _, _, _, _ in self.tensors)
        first = {}
        for _, name, b, _, _, _ in self.tensors:
            first[name] = min(first.get(name, b), b)
        top = max(counts.values())
        return min((n for n, c in counts.items() if c == top), key=lambda n: first[n])

    def lateness(self):
        """ranks x steps matrix of ms behind the step's first submitter of the reference tensor."""
        per_rank = {r: sorted(ts for ts, _ in self.submits.get((r, self.reference), [])) for r in self.ranks}
        steps = min((len(v) for v in per_rank.values()), default=0)
        matrix = []
        for k in range(steps):
            first = min(per_rank[r][k] for r in self.ranks)
            matrix.append([(per_rank[r][k] - first) / 1e3 for r in self.ranks])
        return [list(col) for col in zip(*matrix)] if matrix else []


def svg(fig):
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def plot_steps(t):
    fig, ax = plt.subplots(figsize=(8, 3.2))
    times = [(b - a) / 1e3 for a, b in zip(t.steps, t.steps[1:])]
    ax.plot(range(1, len(times) + 1), times, marker="o", markersize=3, color="#1f77b4")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step time (between first submissions of %s, node 0)" % t.reference, fontsize=10)
    ax.grid(alpha=0.3)
    return svg(fig), times


def plot_lateness(t):
    m = t.lateness()
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(t.ranks), 2) + 1.6))
    if m:
        im = ax.imshow(m, aspect="auto", cmap="magma_r", interpolation="nearest")
        fig.colorbar(im, ax=ax, label="ms behind the step's first submitter")
    ax.set_yticks(range(len(t.ranks)))
    ax.set_yticklabels(["rank %d" % r for r in t.ranks])
    ax.set_xlabel("step")
    ax.set_title("Per-rank lateness (%s)" % t.reference, fontsize=10)
    return svg(fig), m


def plot_stages(t):
    steps = max(len(t.steps), 1)
    nodes = sorted({n for n, *_ in t.tensors})
    totals = {n: collections.Counter() for n in nodes}
    for node, _, _, _, _, ph in t.tensors:
        for p, us in ph.items():
            totals[node][p] += us
    fig, ax = plt.subplots(figsize=(8, 0.6 * max(len(nodes), 2) + 1.4))
    left = [0.0] * len(nodes)
    for p in PHASES:
        widths = [totals[n][p] / 1e3 / steps for n in nodes]
        ax.barh(range(len(nodes)), widths, left=left, color=COLORS[p], label=p)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(nodes)))
    ax.set_yticklabels([t.nodes.get(n, "node %d" % n) for n in nodes])
    ax.set_xlabel("tensor time per step, summed over tensors (ms)")
    ax.set_title("Time per stage", fontsize=10)
    ax.legend(fontsize=8, ncol=4, loc="lower right")
    return svg(fig), {n: {p: totals[n][p] / 1e3 / steps for p in PHASES} for n in nodes}


def plot_top_wait(t, top=15):
    waits = collections.defaultdict(list)
    for _, name, _, _, _, ph in t.tensors:
        waits[name].append((ph.get("WAIT_FOR_RANKS", 0) + ph.get("NEGOTIATE", 0)) / 1e3)
    ranked = sorted(((sum(v) / len(v), n) for n, v in waits.items()), reverse=True)[:top]
    fig, ax = plt.subplots(figsize=(8, 0.32 * max(len(ranked), 3) + 1.2))
    ax.barh(range(len(ranked)), [w for w, _ in ranked], color="#d62728")
    ax.set_yticks(range(len(ranked)))
    ax.set_yticklabels([n for _, n in ranked], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean wait per occurrence: WAIT_FOR_RANKS + NEGOTIATE (ms)")
    ax.set_title("Top tensors by wait", fontsize=10)
    return svg(fig), ranked


def plot_timeline(t, last_steps=3):
    """The last steps as lanes: per node, its ranks' submissions, its tensors' phases (one row per
    tensor name, as Perfetto's async tracks), and the daemon's execution and network spans."""
    if len(t.steps) > last_steps:
        start = t.steps[-last_steps - 1]
    else:
        start = min(b for _, _, b, _, _, _ in t.tensors)
    end = max(e for _, _, _, e, _, _ in t.tensors)
    names = sorted({n for _, n, _, _, _, _ in t.tensors if not n.startswith("syncd.")})
    lanes = []  # (label, kind, key)
    for node in sorted(t.nodes or {0: ""}):
        for r in t.ranks:
            if any(p == node for ts_p in [v for (rr, _), v in t.submits.items() if rr == r] for _, p in ts_p):
                lanes.append(("node %d rank %d" % (node, r), "rank", (node, r)))
        for n in names:
            lanes.append(("node %d %s" % (node, n), "tensor", (node, n)))
        for kind, label in (("exec", "execution"), ("net", "network")):
            lanes.append(("node %d %s" % (node, label), kind, node))
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(lanes) + 1.4))
    ms = lambda us: (us - start) / 1e3  # noqa: E731
    for y, (label, kind, key) in enumerate(lanes):
        if kind == "rank":
            node, r = key
            xs = [ms(ts) for (rr, _), v in t.submits.items() if rr == r for ts, p in v if p == node and start <= ts <= end]
            ax.vlines(xs, y - 0.35, y + 0.35, color="#333", linewidth=1)
        elif kind == "tensor":
            node, n = key
            for p, name, b, e, _, phases in t.tensors:
                if p != node or name != n or e < start or b > end:
                    continue
                x = b
                for phase in PHASES:
                    d = phases.get(phase, 0)
                    if d > 0:
                        ax.broken_barh([(ms(x), d / 1e3)], (y - 0.35, 0.7), color=COLORS[phase])
                        x += d
        else:
            node = key
            for p, tid, name, ts, dur in t.spans:
                lane = "net" if 3_000_000 <= tid < 4_000_000 else ("exec" if 2_000_000 <= tid < 3_000_000 else None)
                if p == node and lane == kind and ts + dur >= start and ts <= end:
                    ax.broken_barh([(ms(ts), max(dur, 1) / 1e3)], (y - 0.35, 0.7),
                                   color="#2ca02c" if kind == "exec" else "#9467bd")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([label for label, _, _ in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, ms(end))
    ax.set_xlabel("ms (node 0's clock)")
    ax.set_title("Timeline of the last %d steps" % min(last_steps, max(len(t.steps), 1)), fontsize=10)
    handles = [matplotlib.patches.Patch(color=COLORS[p], label=p) for p in PHASES]
    handles += [matplotlib.patches.Patch(color="#2ca02c", label="execution"),
                matplotlib.patches.Patch(color="#9467bd", label="network")]
    ax.legend(handles=handles, fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.08 - 1.0 / len(lanes)))
    return svg(fig)


def report(path, out):
    t = Timeline(load(path))
    steps_svg, step_times = plot_steps(t)
    late_svg, late = plot_lateness(t)
    stage_svg, stages = plot_stages(t)
    wait_svg, waits = plot_top_wait(t)
    timeline_svg = plot_timeline(t)
    span = (max(e for _, _, _, e, _, _ in t.tensors) - min(b for _, _, b, _, _, _ in t.tensors)) / 1e6 if t.tensors else 0
    mean_step = sum(step_times) / len(step_times) if step_times else 0
    rows = []
    for i, r in enumerate(t.ranks):
        v = late[i] if late else []
        rows.append((r, sum(v) / len(v) if v else 0, max(v) if v else 0,
                     sum(1 for k in range(len(v)) if v[k] == max(late[j][k] for j in range(len(late))) and v[k] > 0)))
    # The straggler is the rank the others wait for most often: one long stall of another rank (a
    # page-in, a descheduled process) raises its mean, not the steps it was last in.
    rows.sort(key=lambda x: (-x[3], -x[1]))
    clocks = "".join("<li>%s: %+.1f &micro;s &plusmn; %.1f &micro;s</li>" % (html.escape(t.nodes.get(n, "node %d" % n)), o, e)
                     for n, (o, e) in sorted(t.clocks.items()))
    table = "".join("<tr><td>%d</td><td>%.2f</td><td>%.2f</td><td>%d</td></tr>" % row for row in rows)
    page = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>syncd timeline report: {name}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 60em; color: #222; }}
figure {{ margin: 1.5em 0; }} figcaption {{ font-size: 0.9em; color: #555; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
</style></head><body>
<h1>syncd timeline report</h1>
<p id="summary"><b>{name}</b>: {nodes} node(s), {ranks} rank(s), {tensors} tensor executions over {span:.2f} s;
{steps} steps of {ref}, mean step {mean_step:.1f} ms.</p>
<figure id="timeline">{timeline_svg}<figcaption>The timeline: each rank's submissions (ticks), each tensor's phases on each node, the daemons' fused groups and inter-node steps.</figcaption></figure>
<figure id="step-time">{steps_svg}<figcaption>Step time: from one first submission of the reference tensor to the next (node 0).</figcaption></figure>
<figure id="lateness">{late_svg}<figcaption>Per-rank lateness: ms after the step's first submitter, every node on node 0's clock.</figcaption></figure>
<h2>Stragglers</h2>
<table id="stragglers"><tr><th>rank</th><th>mean late ms</th><th>max late ms</th><th>steps last</th></tr>{table}</table>
<figure id="stages">{stage_svg}<figcaption>Time per stage: each node's tensors, their phases summed, per step.</figcaption></figure>
<figure id="top-wait">{wait_svg}<figcaption>Top tensors by wait (for other ranks, then for the other nodes).</figcaption></figure>
<h2>Clocks</h2><ul id="clocks">{clocks}</ul>
<p>Generated by <code>syncctl report</code> from <code>{path}</code>.</p>
</body></html>
""".format(name=html.escape(os.path.basename(path)), nodes=len(t.nodes) or 1, ranks=len(t.ranks), tensors=len(t.tensors),
           span=span, steps=len(t.steps), ref=html.escape(t.reference), mean_step=mean_step, steps_svg=steps_svg,
           late_svg=late_svg, table=table, timeline_svg=timeline_svg, stage_svg=stage_svg, wait_svg=wait_svg,
           clocks=clocks or "<li>one node: no offsets</li>", path=html.escape(path))
    with open(out, "w") as f:
        f.write(page)
    return {"steps": len(t.steps), "mean_step_ms": mean_step, "ranks": t.ranks, "reference": t.reference,
            "worst_rank": rows[0][0] if rows else None, "stages": stages, "top_wait": waits[:3]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    try:
        summary = report(args.timeline, args.output)
    except (OSError, ValueError, KeyError) as e:
        print("syncctl report: %s: %s" % (args.timeline, e), file=sys.stderr)
        return 1
    print("report: %s (%d steps of %s, mean %.1f ms; most late: rank %s)" % (
        args.output, summary["steps"], summary["reference"], summary["mean_step_ms"], summary["worst_rank"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
