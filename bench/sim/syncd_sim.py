#!/usr/bin/python3
"""A discrete-event model of syncd's coordination and its small-message host path (issue 36, item 5).

Each node's daemon is an engine thread; each rank a thread of its own. Both run on CPUs: either a
pool of shared cores (`--cores C`: every daemon and rank of the simulated job on C cores, as on
this 2-core machine, one FIFO run queue) or each on its own core (`--cores 0`, a real cluster).
A thread that gets work while asleep pays a wake-up and then runs its work items one after the
other until it has none; a message costs its sender `send` and its receiver `recv` of CPU and
takes `latency` (+ bytes / bandwidth) on the network.

What the daemons do is written after the code (daemon/coord/negotiator.cc, host_collectives.cc):
  negotiate  a cycle starts when a rank's tensor is new here (cycle-start work) or cycle-time after
             the last one; its agreement (an AND of the nodes' ready bits) is a recursive-doubling
             allreduce below 16 nodes and a binomial tree (up to node 0 and back) from 16
             (TreeCombine); what is ready everywhere then runs, blocking the engine
  gs         negotiate, then an agreement on the job's minimum sleep after every cycle
  nbcs       negotiate's cycle start and agreement, but non-blocking: an agreement waiting on the
             network sleeps at once (no blocked spin). (On-demand cycles with requests are TOPO's,
             for what is outside its plan: the planned step needs none.)
  topo       no agreement: a planned tensor runs as soon as this node's ranks submitted it
An 8-byte allreduce's data: as the agreement (recursive doubling below 16 nodes, the tree from
16: --host-allreduce auto). One rank per daemon, one tensor
per step, back to back (what `syncd-bench scaling` runs); `--ranks-per-node` and `--tensors`
change that.

Usage:
  syncd_sim.py --nodes 2,4,8,16,32 --modes negotiate,gs,nbcs,topo --cores 2 [--steps 200]
  syncd_sim.py --validate scaling.json    # against bench/scaling.sh's JSON line (same cores)
  syncd_sim.py --nodes 4608 --ranks-per-node 6 --cores 0 --latency 2 ...   # a Summit-sized job
The last line is one JSON object.
"""
import argparse
import collections
import heapq
import itertools
import json
import math
import sys

# Calibrated on this machine's daemons (bench/scaling.sh, 2 cores, 2-32 daemons); microseconds.
DEFAULT_COSTS = {
    "daemon_wake": 14.0,   # an engine thread's wake-up (ppoll return, UCX arm, the loop around)
    "rank_wake": 10.0,     # a rank's: its completion read, the next submission written
    "send": 3.0,           # a message's sender side
    "recv": 4.0,           # its receiver side (progress, match, decode)
    "submit": 2.0,         # the engine reading a submission
    "cycle": 4.0,          # a cycle's own work beyond its messages
    "poll": 2.0,           # one look at the network while data is awaited (then sched_yield)
    "poll_per_peer": 0.0,  # ... and per other node (the transport's progress covers every endpoint)
    "wake_per_peer": 0.0,  # a daemon's wake-up, per other node
    "block_spin": 20.0,    # negotiate, gs: a blocked cycle polls this long, then sleeps on events
    "spin": 200.0,         # --spin-us: after real work the engine spins (pause, no yield) this long
    "preempt_after": 0.0,  # a spinner keeps the core this long before a woken thread takes it
    "latency": 1.0,        # on the wire (loopback: the kernel's)
    "bandwidth": 5000.0,   # bytes per microsecond
    "cycle_time": 1000.0,  # --cycle-time-us
    "tree_from": 16,       # kTreeCombineFrom
}


class Sim:
    def __init__(self):
        self.now = 0.0
        self.queue = []
        self.order = itertools.count()

    def at(self, t, fn):
        heapq.heappush(self.queue, (t, next(self.order), fn))

    def run(self, done):
        while self.queue and not done():
            t, _, fn = heapq.heappop(self.queue)
            self.now = t
            fn()


class Thread:
    def __init__(self, wake):
        self.wake_cost = wake
        self.work = collections.deque()
        self.queued = self.running = False
        self.warm = False  # yielded while runnable: no wake-up to pay when it runs again
        self.spin_until = 0.0  # after real work: keeps the core, spinning, until then
        self.spin_from = 0.0
        self.cpu = 0.0
        self.wakeups = 0
        self.preempt_after = 0.0
        self.spin_from = 0.0


class Cpu:
    """`cores` shared cores (one FIFO run queue), or 0: a core per thread."""

    def __init__(self, sim, cores):
        self.sim, self.cores, self.busy = sim, cores, 0
        self.ready = collections.deque()

    def post(self, th, cost, fn, yields=False):
        th.work.append((cost, fn, yields))
        if not th.queued and not th.running:
            th.queued = True
            self.ready.append(th)
            self.dispatch()

    def dispatch(self):
        while self.ready and (self.cores == 0 or self.busy < self.cores):
            th = self.ready.popleft()
            th.queued, th.running = False, True
            self.busy += 1
            wake = 0.0 if th.warm else th.wake_cost
            th.warm = False
            th.cpu += wake
            th.wakeups += wake > 0
            self.sim.at(self.sim.now + wake, lambda th=th: self.step(th))

    def step(self, th):
        if not th.work and th.spin_until > self.sim.now:
            # Spinning (pause): what comes meanwhile needs no wake-up. A thread that wakes takes
            # the core from a spinner (the scheduler's wake-up preemption): it runs again after.
            if self.ready and self.cores != 0 and self.sim.now >= th.spin_from + th.preempt_after:
                th.running, th.queued, th.warm = False, True, True
                self.busy -= 1
                self.ready.append(th)
                self.dispatch()
                return
            chunk = min(10.0, th.spin_until - self.sim.now)
            th.cpu += chunk
            self.sim.at(self.sim.now + chunk, lambda: self.step(th))
            return
        if not th.work:
            th.running = False
            self.busy -= 1
            self.dispatch()
            return
        cost, fn, yields = th.work.popleft()
        th.cpu += cost

        def finish():
            fn()
            if yields and th.work and self.ready and self.cores != 0:
                # sched_yield with others runnable: to the back of the run queue, still awake.
                th.running, th.queued, th.warm = False, True, True
                self.busy -= 1
                self.ready.append(th)
                self.dispatch()
                return
            self.step(th)
        self.sim.at(self.sim.now + cost, finish)


def children(node, nodes):
    low = (1 << 40) if node == 0 else node & -node
    out, step = [], 1
    while step < low and node + step < nodes:
        out.append(node + step)
        step <<= 1
    return out


class Daemon(Thread):
    def __init__(self, world, node):
        super().__init__(world.c["daemon_wake"] + world.c["wake_per_peer"] * (world.nodes - 1))
        self.poll_cost = world.c["poll"] + world.c["poll_per_peer"] * (world.nodes - 1)
        self.preempt_after = world.c["preempt_after"]
        self.w, self.node = world, node
        self.mail = {}
        self.awaited = None
        self.idle = False  # waiting for work (or until idle_deadline)
        self.idle_deadline = None
        self.ranks = []
        self.pending = collections.Counter()  # tensor -> local submissions
        self.fresh = False
        self.seq = 0
        self.last_start = -1e18
        self.block_start = 0.0
        self.sent = self.coord_sent = self.cycles = 0
        self.gen = self.main()

    # The engine thread's program, advanced inside CPU work items.
    def resume(self, value=None):
        while self.gen is not None:
            try:
                cmd = self.gen.send(value)
            except StopIteration:
                self.gen = None
                return
            value = None
            if cmd[0] == "send":
                _, peer, key, val, nbytes, coord = cmd
                self.sent += 1
                self.coord_sent += coord
                self.w.cpu.post(self, self.w.c["send"], lambda p=peer, k=key, v=val, b=nbytes: self.w.deliver(self, p, k, v, b))
            elif cmd[0] == "cpu":
                self.w.cpu.post(self, cmd[1], lambda: None)
            elif cmd[0] == "recv":
                key = (cmd[1], cmd[2])
                if key in self.mail:
                    value = self.mail.pop(key)
                else:
                    self.awaited = key
                    kind = key[1][0][0]
                    limit = None  # data waits poll the network (sched_yield between looks)
                    if kind != "data":  # a blocked cycle polls a while, then sleeps; nbcs's sleeps at once
                        # (syncrun's --network-wait sleep for daemons that share cores)
                        limit = self.block_start + self.w.c["block_spin"] if self.w.mode in ("negotiate", "gs") else -1
                    if limit is None or self.w.sim.now < limit:
                        self.w.cpu.post(self, self.poll_cost, lambda k=key, l=limit: self.poll(k, l), yields=True)
                    return
            elif cmd[0] == "idle":  # until new work, a cycle asked for, or time cmd[1]
                if self.due() or (cmd[1] is not None and cmd[1] <= self.w.sim.now):
                    continue
                self.idle, self.idle_deadline = True, cmd[1]
                if cmd[1] is not None:
                    self.w.sim.at(cmd[1], lambda t=cmd[1]: self.timer(t))
                return

    def poll(self, key, limit):
        if self.awaited == key and (limit is None or self.w.sim.now < limit):  # not in yet: look again
            self.w.cpu.post(self, self.poll_cost, lambda: self.poll(key, limit), yields=True)

    def due(self):
        return self.fresh

    def timer(self, t):
        if self.idle and self.idle_deadline == t:
            self.w.cpu.post(self, 0.0, lambda: self.wake(t))

    def wake(self, deadline=None):
        if self.idle and (deadline is None or self.idle_deadline == deadline):
            self.idle = False
            self.resume()

    def arrive(self, peer, key, val):
        k = (peer, key)
        if self.awaited == k:
            self.awaited = None
            self.resume(val)
        else:
            self.mail[k] = val

    def submit(self, tensor):
        self.pending[tensor] += 1
        if self.pending[tensor] == len(self.ranks):
            self.fresh = True
            self.wake()

    # Collectives among the daemons, as generators.
    def recursive_doubling(self, key, value, combine, nbytes, coord):
        n = self.w.nodes
        rounds = int(math.log2(n))
        assert 1 << rounds == n, "recursive doubling here needs a power-of-two node count"
        for r in range(rounds):
            peer = self.node ^ (1 << r)
            yield ("send", peer, (key, r), value, nbytes, coord)
            other = yield ("recv", peer, (key, r))
            value = combine(value, other)
        return value

    def tree(self, key, value, combine, nbytes, coord):
        n = self.w.nodes
        for c in children(self.node, n):
            value = combine(value, (yield ("recv", c, (key, "up"))))
        if self.node != 0:
            parent = self.node & (self.node - 1)
            yield ("send", parent, (key, "up"), value, nbytes, coord)
            value = yield ("recv", parent, (key, "down"))
        for c in children(self.node, n):
            yield ("send", c, (key, "down"), value, nbytes, coord)
        return value

    def agree(self, key, value, combine):
        if self.w.nodes == 1:
            return value
        how = self.tree if self.w.nodes >= self.w.c["tree_from"] else self.recursive_doubling
        return (yield from how(key, value, combine, 8, 1))

    def run_data(self, tensors):
        if tensors:
            self.spin_from = self.w.sim.now
            self.spin_until = self.w.sim.now + self.w.c["spin"] + self.w.c["send"]
        for t in sorted(tensors):
            del self.pending[t]
            if self.w.nodes > 1:  # --host-allreduce auto for a small tensor: as the agreement
                how = self.tree if self.w.nodes >= self.w.c["tree_from"] else self.recursive_doubling
                yield from how(("data", t), 0, lambda a, b: a, self.w.nbytes, 0)
            for r in self.ranks:
                self.w.cpu.post(r, 0.0, lambda r=r, t=t: r.complete(t))

    def ready(self):
        return frozenset(t for t, k in self.pending.items() if k == len(self.ranks))

    def main(self):
        c, mode = self.w.c, self.w.mode
        while True:
            if mode == "topo":
                yield ("idle", None)
                self.fresh = False
                yield from self.run_data(self.ready())
                continue
            yield ("idle", self.last_start + c["cycle_time"])
            self.last_start = self.block_start = self.w.sim.now
            self.fresh = False
            self.seq += 1
            self.cycles += 1
            yield ("cpu", c["cycle"])
            agreed = yield from self.agree(("cycle", self.seq), self.ready(), lambda a, b: a & b)
            yield from self.run_data(agreed)
            if mode == "gs":
                elapsed = self.w.sim.now - self.last_start
                sleep = yield from self.agree(("gs", self.seq), max(0.0, c["cycle_time"] - elapsed), min)
                if sleep > 0 and not self.fresh:
                    yield ("idle", self.w.sim.now + sleep)


class Rank(Thread):
    def __init__(self, world, daemon):
        super().__init__(world.c["rank_wake"])
        self.w, self.daemon = world, daemon
        self.steps = 0
        self.done_at = []

    def complete(self, tensor):
        self.steps += 1
        self.done_at.append(self.w.sim.now)
        if self.steps < self.w.total_steps:
            self.submit(tensor)

    def submit(self, tensor):
        d = self.daemon
        self.w.cpu.post(d, self.w.c["submit"], lambda: d.submit(tensor))


class World:
    def __init__(self, nodes, ranks_per_node, mode, cores, costs, steps, warmup, nbytes=8):
        self.nodes, self.mode, self.c = nodes, mode, costs
        self.nbytes = nbytes
        self.total_steps = warmup + steps
        self.warmup, self.steps = warmup, steps
        self.sim = Sim()
        self.cpu = Cpu(self.sim, cores)
        self.daemons = [Daemon(self, n) for n in range(nodes)]
        self.ranks = []
        for d in self.daemons:
            for _ in range(ranks_per_node):
                r = Rank(self, d)
                d.ranks.append(r)
                self.ranks.append(r)

    def deliver(self, sender, peer, key, val, nbytes):
        d = self.daemons[peer]
        t = self.sim.now + self.c["latency"] + nbytes / self.c["bandwidth"]
        self.sim.at(t, lambda: self.cpu.post(d, self.c["recv"], lambda: d.arrive(sender.node, key, val)))

    def run(self):
        for d in self.daemons:
            self.cpu.post(d, 0.0, d.resume)
        for r in self.ranks:
            self.cpu.post(r, 0.0, lambda r=r: r.submit("step"))
        marks = {}

        def done():
            finished = min(r.steps for r in self.ranks)
            if finished >= self.warmup and "start" not in marks:
                marks["start"] = self.sim.now
                marks["counts"] = [(d.coord_sent, d.cycles, d.cpu) for d in self.daemons]
            return finished >= self.total_steps
        self.sim.run(done)
        start = marks["start"]
        n = self.nodes
        coord = sum(d.coord_sent - c[0] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        busiest = max(d.coord_sent - c[0] for d, c in zip(self.daemons, marks["counts"])) / self.steps
        cycles = sum(d.cycles - c[1] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        cpu = sum(d.cpu - c[2] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        return {"mode": self.mode, "daemons": n, "ranks": len(self.ranks),
                "step_us": (self.sim.now - start) / self.steps, "msgs_per_daemon_step": coord,
                "msgs_max_daemon_step": busiest, "cycles_per_step": cycles if self.mode != "topo" else 0.0,
                "engine_cpu_us_per_daemon_step": cpu}


def simulate(nodes, mode, cores, costs, steps=200, warmup=20, ranks_per_node=1, nbytes=8):
    return World(nodes, ranks_per_node, mode, cores, costs, steps, warmup, nbytes).run()


def validate(path, cores, costs, steps):
    line = [l for l in open(path) if l.startswith("{")][-1]
    rows = json.loads(line)["rows"]
    out = []
    for r in rows:
        s = simulate(r["daemons"], r["label"], cores, costs, steps)
        row = {"mode": r["label"], "daemons": r["daemons"], "real_step_us": r["step_us"], "sim_step_us": s["step_us"],
               "real_msgs": r["msgs_per_daemon_step"], "sim_msgs": s["msgs_per_daemon_step"],
               "real_cycles": r.get("cycles_per_step", 0.0), "sim_cycles": s["cycles_per_step"],
               "real_cpu_us": r["engine_cpu_us_per_daemon_step"], "sim_cpu_us": s["engine_cpu_us_per_daemon_step"]}
        row["step_err"] = s["step_us"] / r["step_us"] - 1 if r["step_us"] else 0.0
        row["msgs_err"] = (s["msgs_per_daemon_step"] / r["msgs_per_daemon_step"] - 1) if r["msgs_per_daemon_step"] >= 0.5 \
            else s["msgs_per_daemon_step"] - r["msgs_per_daemon_step"]
        out.append(row)
    return out


FIT_COSTS = ("daemon_wake", "wake_per_peer", "poll", "poll_per_peer", "recv", "send")


def fit(path, cores, costs, steps, modes):
    """Costs that bring the model nearest the real rows of `modes` (step time and engine CPU per
    step, squared log errors), by coordinate descent from `costs`."""
    line = [l for l in open(path) if l.startswith("{")][-1]
    rows = [r for r in json.loads(line)["rows"] if r["label"] in modes]

    def error(c):
        e = 0.0
        for r in rows:
            s = simulate(r["daemons"], r["label"], cores, c, steps)
            e += math.log(s["step_us"] / r["step_us"]) ** 2
            e += math.log(max(s["engine_cpu_us_per_daemon_step"], 1e-3) / max(r["engine_cpu_us_per_daemon_step"], 1e-3)) ** 2
        return e
    best = dict(costs)
    best_e = error(best)
    for _ in range(3):
        for k in FIT_COSTS:
            for f in (0.5, 0.75, 1.33, 2.0):
                c = dict(best)
                c[k] = best[k] * f if best[k] > 0 else 0.5 * f
                e = error(c)
                if e < best_e:
                    best, best_e = c, e
        print("# fit: error %.3f with %s" % (best_e, {k: round(best[k], 2) for k in FIT_COSTS}), file=sys.stderr)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="2,4,8,16,32")
    ap.add_argument("--modes", default="negotiate,gs,nbcs,topo")
    ap.add_argument("--cores", type=int, default=2, help="shared cores for every thread; 0: one core each")
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--cost", action="append", default=[], metavar="NAME=US", help="override a cost (see DEFAULT_COSTS)")
    ap.add_argument("--validate", metavar="SCALING_JSON", help="compare with bench/scaling.sh's output")
    ap.add_argument("--fit", metavar="MODES", help="with --validate: first fit the costs to these modes' rows")
    a = ap.parse_args()
    costs = dict(DEFAULT_COSTS)
    for kv in a.cost:
        k, v = kv.split("=")
        if k not in costs:
            sys.exit("unknown cost %s (one of %s)" % (k, ", ".join(costs)))
        costs[k] = float(v)
    if a.validate:
        if a.fit:
            costs = fit(a.validate, a.cores, costs, a.steps, a.fit.split(","))
        rows = validate(a.validate, a.cores, costs, a.steps)
        print("# %-10s %7s %11s %11s %7s %9s %9s %7s %8s %8s %8s %8s" % ("mode", "daemons", "real us", "sim us", "err",
              "real msgs", "sim msgs", "err", "real cyc", "sim cyc", "real cpu", "sim cpu"))
        for r in rows:
            print("  %-10s %7d %11.1f %11.1f %+6.0f%% %9.2f %9.2f %+6.0f%% %8.2f %8.2f %8.1f %8.1f" % (
                r["mode"], r["daemons"], r["real_step_us"], r["sim_step_us"], 100 * r["step_err"], r["real_msgs"],
                r["sim_msgs"], 100 * r["msgs_err"], r["real_cycles"], r["sim_cycles"], r["real_cpu_us"], r["sim_cpu_us"]))
        within = sum(abs(r["step_err"]) <= 0.15 and abs(r["msgs_err"]) <= 0.15 for r in rows)
        print("# %d of %d rows within 15 %% on both step time and messages per step" % (within, len(rows)))
        print(json.dumps({"bench": "syncd_sim_validation", "costs": costs, "cores": a.cores, "rows": rows}))
        return
    rows = []
    print("# %-10s %7s %7s %11s %10s %10s %8s %10s" % ("mode", "daemons", "ranks", "step us", "msgs", "max msgs",
                                                      "cycles", "cpu us"))
    for n in [int(x) for x in a.nodes.split(",")]:
        for mode in a.modes.split(","):
            r = simulate(n, mode, a.cores, costs, a.steps, ranks_per_node=a.ranks_per_node, nbytes=a.bytes)
            rows.append(r)
            print("  %-10s %7d %7d %11.1f %10.2f %10.2f %8.2f %10.1f" % (
                mode, n, r["ranks"], r["step_us"], r["msgs_per_daemon_step"], r["msgs_max_daemon_step"],
                r["cycles_per_step"], r["engine_cpu_us_per_daemon_step"]))
    print(json.dumps({"bench": "syncd_sim", "costs": costs, "cores": a.cores, "rows": rows}))


if __name__ == "__main__":
    main()
