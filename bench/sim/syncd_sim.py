#!/usr/bin/python3
"""A discrete-event model of syncd's coordination and its host path (issue 36, item 5).

Each node's daemon is an engine thread; each rank a thread of its own. Threads run on cores as
syncrun pins simulated nodes (`--cores C`: more nodes than cores, node i's daemon and ranks on
core i mod C, one FIFO run queue per core; fewer, a group of cores each) or each on a core of its
own (`--cores 0`, a real cluster). A thread that gets work while asleep pays a wake-up (more on a
crowded core: `wake_per_sharer`) and then runs its work items one after the other until it has
none; after real work an engine spins (`spin`), and a thread woken on its core takes the core
from it. A message costs its sender `send` and its receiver `recv` of CPU and takes `latency`
(+ bytes / bandwidth) on the network.

What the daemons do is written after the code (daemon/coord/negotiator.cc, host_collectives.cc):
  negotiate  a cycle starts when a rank's tensor is new here (cycle-start work) or cycle-time after
             the last one, or when another node's message of the next cycle reaches an idle
             daemon (it joins with what is ready here); its agreement (an AND of the nodes' ready
             bits) is a recursive-doubling allreduce below 16 nodes and a binomial tree (up to
             node 0 and back) from 16 (TreeCombine); what is ready everywhere then runs, fused
             in name order up to the fusion threshold, blocking the engine
  gs         negotiate, then an agreement on the job's minimum sleep after every cycle
  nbcs       negotiate's cycle start and agreement, but non-blocking: where daemons share cores
             (--network-wait sleep) an agreement waiting on the network sleeps at once
  topo       no agreement: the plan's groups (the step's tensors in order, cut at the fusion
             threshold) run in plan order as soon as this node's ranks submitted each
  horovod    Horovod's own controller before its response cache (for the paper's comparison):
             every cycle-time each rank's request list goes to rank 0, which reads one message
             per rank, and its answer comes back by a binomial broadcast
Data up to 64 KiB moves message by message as the agreement does (--host-allreduce auto);
larger groups are timed whole (halving and doubling's rounds, 2 (N-1)/N of the bytes per link).

Workloads: back to back (one 8-byte tensor per step, what `syncd-bench scaling` runs), or a
training step (`--compute-ms`, `--jitter`, `--tensors`, `--grad-mb`): each rank computes, its
backward pass handing the gradients over in order, and waits for all of them.

Usage:
  syncd_sim.py --nodes 2,4,8,16,32 --modes negotiate,gs,nbcs,topo --cores 2 [--steps 200]
  syncd_sim.py --validate scaling.json [--fit MODES]   # against bench/scaling.sh's JSON line
  syncd_sim.py --predict [--plot file.png]              # 4,608 nodes x 6 ranks (PREDICT)
The last line is one JSON object.
"""
import argparse
import collections
import heapq
import itertools
import json
import math
import random
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
    "wake_per_sharer": 0.0,  # a wake-up's extra, per other thread pinned to its core (caches refilled)
    "block_spin": 20.0,    # negotiate, gs: a blocked cycle polls this long, then sleeps on events
    "spin": 200.0,         # --spin-us: after real work the engine spins (pause, no yield) this long
    "preempt_after": 0.0,  # a spinner keeps the core this long before a woken thread takes it
    "latency": 1.0,        # on the wire (loopback: the kernel's)
    "bandwidth": 5000.0,   # bytes per microsecond
    "cycle_time": 1000.0,  # --cycle-time-us
    "tree_from": 16,       # kTreeCombineFrom
    "small_bytes": 65536,  # up to this, data moves message by message (as the agreement); above, timed whole
    "fusion_bytes": 64 << 20,  # --fusion-threshold
    "per_request": 1.0,    # horovod: rank 0's work per rank's request list
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
    def __init__(self, wake, core):
        self.wake_cost, self.core = wake, core
        self.work = collections.deque()
        self.queued = self.running = False
        self.warm = False  # yielded while runnable: no wake-up to pay when it runs again
        self.spin_until = 0.0  # after real work: keeps the core, spinning, until then
        self.spin_from = 0.0
        self.cpu = 0.0
        self.wakeups = 0
        self.preempt_after = 0.0
        self.warm_until = self.released_at = 0.0
        self.poll_until = 0.0  # polling the network until then (on a core of its own)


def plan_cores(nodes, cores, ranks_per_node):
    """Each thread's core, as syncrun pins simulated nodes (launcher.cc, PlanSimulatedNodes):
    more nodes than cores, node i's daemon and ranks on core i mod C; otherwise node i gets a
    group of cores, its daemon the group's last, its ranks the others (the daemon's when the
    group has one). cores 0: a core per thread (a real cluster's dedicated cores)."""
    daemon, ranks, fresh = [], [], itertools.count(0)
    for i in range(nodes):
        if cores == 0:
            daemon.append(next(fresh))
            ranks.append([next(fresh) for _ in range(ranks_per_node)])
        elif nodes >= cores:
            daemon.append(i % cores)
            ranks.append([i % cores] * ranks_per_node)
        else:
            group = list(range(i * cores // nodes, (i + 1) * cores // nodes))
            workers = group[:-1] or group
            daemon.append(group[-1])
            ranks.append([workers[j % len(workers)] for j in range(ranks_per_node)])
    return daemon, ranks


class Cpu:
    """Cores, each with a FIFO run queue of the threads pinned to it."""

    def __init__(self, sim, dedicated):
        self.sim = sim
        self.dedicated = dedicated  # a core per thread: a spinner keeps its core from no one
        self.busy = set()
        self.ready = collections.defaultdict(collections.deque)

    def post(self, th, cost, fn, yields=False):
        th.work.append((cost, fn, yields))
        if not th.queued and not th.running:
            th.queued = True
            self.ready[th.core].append(th)
            self.dispatch(th.core)

    def dispatch(self, core):
        q = self.ready[core]
        if q and core not in self.busy:
            th = q.popleft()
            th.queued, th.running = False, True
            self.busy.add(core)
            if th.warm_until:  # spun on a core of its own since it released it: no wake-up within the spin
                th.cpu += min(self.sim.now, th.warm_until) - th.released_at
                th.warm |= self.sim.now <= th.warm_until
                th.warm_until = 0.0
            wake = 0.0 if th.warm else th.wake_cost
            th.warm = False
            th.cpu += wake
            th.wakeups += wake > 0
            self.sim.at(self.sim.now + wake, lambda th=th: self.step(th))

    def release(self, th, requeue):
        th.running = False
        self.busy.discard(th.core)
        if requeue:  # still runnable: to the back of its core's queue, awake
            th.queued, th.warm = True, True
            self.ready[th.core].append(th)
        self.dispatch(th.core)

    def step(self, th):
        if not th.work and max(th.spin_until, th.poll_until) > self.sim.now and self.dedicated:
            # the spin or the polling, without their events
            th.warm_until, th.released_at = max(th.spin_until, th.poll_until), self.sim.now
            self.release(th, False)
            return
        if not th.work and th.spin_until > self.sim.now:
            # Spinning (pause): what comes meanwhile needs no wake-up. A thread that wakes takes
            # the core from a spinner (the scheduler's wake-up preemption): it runs again after.
            if self.ready[th.core] and self.sim.now >= th.spin_from + th.preempt_after:
                self.release(th, True)
                return
            chunk = min(10.0, th.spin_until - self.sim.now)
            th.cpu += chunk
            self.sim.at(self.sim.now + chunk, lambda: self.step(th))
            return
        if not th.work:
            self.release(th, False)
            return
        cost, fn, yields = th.work.popleft()
        th.cpu += cost

        def finish():
            fn()
            if yields and th.work and self.ready[th.core]:
                self.release(th, True)  # sched_yield with others runnable on its core
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
    def __init__(self, world, node, core):
        super().__init__(world.c["daemon_wake"] + world.c["wake_per_sharer"] * (world.sharers[core] - 1), core)
        self.poll_cost = world.c["poll"] + world.c["poll_per_peer"] * (world.nodes - 1)
        self.preempt_after = world.c["preempt_after"]
        self.w, self.node = world, node
        self.mail = {}
        self.waiting = {}  # (peer, key) -> the task that waits for it
        self.taker = self.hander = self.slot = None  # an agreement handed from the cycle to the executor
        self.idle = False  # waiting for work (or until idle_deadline)
        self.idle_deadline = None
        self.ranks = []
        self.pending = collections.Counter()  # tensor -> local submissions
        self.fresh = False
        self.joining = False  # another node's message of this node's next cycle came: it runs now
        self.planned = 0  # topo: the plan's next group
        self.next_start = 0.0  # gs: when the agreed sleep ends
        self.seq = 0
        self.last_start = -1e18
        self.block_start = 0.0
        self.sent = self.coord_sent = self.cycles = 0
        self.coordinator = self.main()
        # negotiate, gs, nbcs: a cycle ends once its agreement is taken, and the next one runs
        # while that agreement executes (negotiator.cc: at most one waits; overlapped cycles).
        self.executor = self.execute() if world.mode in ("negotiate", "gs", "nbcs") else None

    def start(self):
        self.resume(self.coordinator)
        if self.executor is not None:
            self.resume(self.executor)

    # The engine thread's tasks (coroutines), advanced inside CPU work items.
    def resume(self, gen, value=None):
        while True:
            try:
                cmd = gen.send(value)
            except StopIteration:
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
                    self.waiting[key] = gen
                    kind = key[1][0][0]
                    limit = None  # data waits poll the network (sched_yield between looks)
                    if kind == "coll":  # a large collective, timed as a whole: no look costs time
                        limit = -1
                    elif kind != "data":  # a blocked cycle polls a while, then sleeps; nbcs's sleeps at once
                        # where daemons share cores (syncrun's --network-wait sleep), else polls
                        if self.w.mode in ("negotiate", "gs"):
                            limit = self.block_start + self.w.c["block_spin"]
                        elif self.w.network_sleep:
                            limit = -1
                    if self.w.cpu.dedicated and (limit is None or self.w.sim.now < limit):
                        # On a core of its own a poller delays no one: it sees the message as it
                        # comes, without a wake-up, and its looks are not events of their own.
                        self.poll_until = max(self.poll_until, math.inf if limit is None else limit)
                    elif limit is None or self.w.sim.now < limit:
                        self.w.cpu.post(self, self.poll_cost, lambda k=key, l=limit: self.poll(k, l), yields=True)
                    return
            elif cmd[0] == "idle":  # until new work, a cycle asked for, or time cmd[1]
                if self.due() or (cmd[1] is not None and cmd[1] <= self.w.sim.now):
                    continue
                self.idle, self.idle_deadline = True, cmd[1]
                if cmd[1] is not None:
                    self.w.sim.at(cmd[1], lambda t=cmd[1]: self.timer(t))
                return
            elif cmd[0] == "hand":  # the cycle's agreement to the executor; the cycle ends once taken
                if self.taker is not None:
                    taker, self.taker = self.taker, None
                    self.w.cpu.post(self, 0.0, lambda t=taker, v=cmd[1]: self.resume(t, v))
                    continue
                self.slot, self.hander = cmd[1], gen
                return
            elif cmd[0] == "take":  # the executor: the next agreement
                if self.hander is not None:
                    value, hander = self.slot, self.hander
                    self.slot = self.hander = None
                    self.w.cpu.post(self, 0.0, lambda h=hander: self.resume(h))
                    continue
                self.taker = gen
                return

    def poll(self, key, limit):
        if key in self.waiting and (limit is None or self.w.sim.now < limit):  # not in yet: look again
            self.w.cpu.post(self, self.poll_cost, lambda: self.poll(key, limit), yields=True)

    def due(self):
        return (self.fresh and self.w.mode != "horovod") or self.joining  # horovod: its timer only

    def timer(self, t):
        if self.idle and self.idle_deadline == t:
            self.w.cpu.post(self, 0.0, lambda: self.wake(t))

    def wake(self, deadline=None):
        if self.idle and (deadline is None or self.idle_deadline == deadline):
            self.idle = False
            self.resume(self.coordinator)

    def arrive(self, peer, key, val):
        k = (peer, key)
        if k in self.waiting:
            self.poll_until = 0.0
            self.resume(self.waiting.pop(k), val)
        else:
            self.mail[k] = val
            # A cycle another node started reaches an idle daemon: it runs that cycle now, with
            # what is ready here (negotiator.cc: an idle cycle), rather than at its own timer.
            if key[0][0] == "cycle" and key[0][1] == self.seq + 1 and self.idle:
                self.joining = True
                self.wake()

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

    def whole(self, key, value, combine, nbytes):
        """A collective timed as a whole (World.join): done for every node when the last joins."""
        key = (key, "whole")
        self.w.join(key, value, combine, nbytes)
        return (yield ("recv", -1, key))

    def run_data(self, tensors):
        """An agreement's tensors, fused in name order up to the fusion threshold."""
        yield from self.run_groups(self.w.fuse(sorted(tensors)))

    def run_groups(self, groups):
        if groups:
            self.spin_from = self.w.sim.now
            self.spin_until = self.w.sim.now + self.w.c["spin"] + self.w.c["send"]
        for group, size in groups:
            for t in group:
                del self.pending[t]
            if self.w.nodes > 1 and size <= self.w.c["small_bytes"]:
                # --host-allreduce auto for a small tensor: as the agreement, message by message
                how = self.tree if self.w.nodes >= self.w.c["tree_from"] else self.recursive_doubling
                yield from how(("data", group[0]), 0, lambda a, b: a, size, 0)
            elif self.w.nodes > 1:
                yield from self.whole(("coll", "data", group[0]), 0, lambda a, b: a, size)
            for t in group:
                for r in self.ranks:
                    self.w.cpu.post(r, 0.0, lambda r=r, t=t: r.complete(t))

    def execute(self):
        while True:
            agreed = yield ("take",)
            yield from self.run_data(agreed)

    def ready(self):
        return frozenset(t for t, k in self.pending.items() if k == len(self.ranks))

    def main(self):
        c, mode = self.w.c, self.w.mode
        while True:
            if mode == "horovod":
                # Horovod's own controller (before its response cache): every rank's background
                # thread, each cycle, sends its ready names to rank 0 (a gather: rank 0 reads one
                # message per rank), which answers all (a broadcast). Timed as a whole.
                yield ("idle", self.last_start + c["cycle_time"])
                self.last_start = self.w.sim.now
                self.fresh = False
                self.seq += 1
                self.cycles += 1
                self.coord_sent += 1 if self.node else self.w.nodes - 1
                agreed = yield from self.whole(("coll", "hvd", self.seq), self.ready(), lambda a, b: a & b, 0)
                yield from self.run_data(agreed)
                continue
            if mode == "topo":
                # The plan's groups in plan order, each once every tensor of it is ready here.
                yield ("idle", None)
                self.fresh = False
                plan = self.w.plan
                while all(self.pending[t] == len(self.ranks) for t in plan[self.planned][0]):
                    group = plan[self.planned]
                    self.planned = (self.planned + 1) % len(plan)
                    yield from self.run_groups([group])
                continue
            # gs's timer is the agreed sleep's end (negotiator.cc: next_start_), the others' the
            # cycle time after the last start; work here starts one at once in every mode.
            yield ("idle", self.next_start if mode == "gs" else self.last_start + c["cycle_time"])
            self.last_start = self.block_start = self.w.sim.now
            self.fresh = self.joining = False
            self.seq += 1
            self.cycles += 1
            yield ("cpu", c["cycle"])
            agreed = yield from self.agree(("cycle", self.seq), self.ready(), lambda a, b: a & b)
            for t in agreed:
                self.pending[t] = -1  # agreed: no later cycle offers it again
            yield ("hand", agreed)
            if mode == "gs":
                elapsed = self.w.sim.now - self.last_start
                sleep = yield from self.agree(("gs", self.seq), max(0.0, c["cycle_time"] - elapsed), min)
                self.next_start = self.w.sim.now + sleep


class Rank(Thread):
    def __init__(self, world, daemon, core, group=1):
        super().__init__(world.c["rank_wake"] + world.c["wake_per_sharer"] * (world.sharers[core] - 1), core)
        self.w, self.daemon = world, daemon
        self.group = group  # the ranks it stands for (training on dedicated cores: a node's)
        self.steps = 0
        self.outstanding = 0
        self.computed = 0.0  # this rank's compute time, summed over steps

    def start_step(self):
        """Back to back (no compute): the step's tensors at once. Training: forward, then backward
        hands the gradients over in order across its part of the step; the step's compute time
        drawn once per rank and step (imbalance: compute x (1 + jitter x |N(0, 1)|))."""
        w = self.w
        self.outstanding = len(w.names)
        if w.compute <= 0:
            for t in w.names:
                self.submit(t)
            return
        # A group's ranks hand each gradient over by the slowest of them: one draw each, the
        # slowest's times (a rank's ready times grow with its compute).
        draws = [w.compute * (1 + w.jitter * abs(w.rng.gauss(0, 1))) for _ in range(self.group)]
        c = max(draws)
        self.computed += c
        w.slowest[self.steps] = max(w.slowest.get(self.steps, 0.0), c)
        w.mean_compute[self.steps] = w.mean_compute.get(self.steps, 0.0) + sum(draws) / w.rank_count
        now, back = w.sim.now, w.backward
        for k, t in enumerate(w.names):
            w.sim.at(now + c * (1 - back) + c * back * (k + 1) / len(w.names), lambda t=t: self.submit(t))

    def complete(self, tensor):
        self.outstanding -= 1
        if self.outstanding == 0:
            self.steps += 1
            self.w.reached[self.steps] += 1  # ranks that finished this many steps
            if self.steps < self.w.total_steps:
                self.start_step()

    def submit(self, tensor):
        d = self.daemon
        self.w.cpu.post(d, self.w.c["submit"] * self.group, lambda: d.submit(tensor))


class World:
    def __init__(self, nodes, ranks_per_node, mode, cores, costs, steps, warmup, nbytes=8, workload=None):
        self.nodes, self.mode, self.c = nodes, mode, costs
        wl = dict(workload or {})
        self.compute, self.jitter = wl.get("compute_us", 0.0), wl.get("jitter", 0.0)
        self.backward = wl.get("backward", 2 / 3)
        tensors = int(wl.get("tensors", 1))
        self.names = ["step"] if tensors == 1 else ["t%05d" % k for k in range(tensors)]
        self.nbytes = wl.get("bytes", nbytes) / tensors
        self.rng = random.Random(wl.get("seed", 1))
        self.joins = {}
        self.reached = collections.Counter()
        self.plan = self.fuse(self.names)  # topo: the fusion plan, the step's gradients in order
        self.slowest, self.mean_compute = {}, {}  # per step: the slowest rank's compute, the mean
        self.ranks_per_node = ranks_per_node
        self.total_steps = warmup + steps
        self.warmup, self.steps = warmup, steps
        self.sim = Sim()
        self.cpu = Cpu(self.sim, cores == 0)
        # Daemons that share cores sleep on the network while a cycle waits (--network-wait sleep).
        self.network_sleep = cores != 0 and nodes > cores
        daemon_cores, rank_cores = plan_cores(nodes, cores, ranks_per_node)
        self.sharers = collections.Counter(daemon_cores + [c for rc in rank_cores for c in rc])
        self.daemons = [Daemon(self, n, daemon_cores[n]) for n in range(nodes)]
        self.ranks = []
        self.rank_count = nodes * ranks_per_node
        # Training on dedicated cores: a node's ranks only hand gradients to its daemon, so one
        # thread stands for them all (the model's events grow with nodes, not ranks).
        grouped = cores == 0 and self.compute > 0
        for d in self.daemons:
            for core in rank_cores[d.node][:1] if grouped else rank_cores[d.node]:
                r = Rank(self, d, core, ranks_per_node if grouped else 1)
                d.ranks.append(r)
                self.ranks.append(r)

    def tensor_bytes(self, tensor):
        return self.nbytes

    def fuse(self, names):
        """Consecutive names in groups within the fusion threshold: (names, bytes) each."""
        groups, group, size = [], [], 0
        for t in names:
            b = self.tensor_bytes(t)
            if group and size + b > self.c["fusion_bytes"]:
                groups.append((group, size))
                group, size = [], 0
            group.append(t)
            size += b
        if group:
            groups.append((group, size))
        return groups

    def join(self, key, value, combine, nbytes):
        """A collective timed as a whole: when the last node joins, each gets the combined value
        after its duration. data: halving's rounds and bytes (2 (N-1)/N of them over each link);
        hvd: Horovod's gather to rank 0 (it reads N messages) and broadcast (a binomial tree)."""
        j = self.joins.setdefault(key, [0, None])
        j[0] += 1
        j[1] = value if j[0] == 1 else combine(j[1], value)
        if j[0] < self.nodes:
            return
        del self.joins[key]
        n, c = self.nodes, self.c
        hops = math.ceil(math.log2(n)) * (c["latency"] + c["send"] + c["recv"])
        if key[0][1] == "hvd":  # every rank takes part
            p = n * self.ranks_per_node
            took = p * (c["recv"] + c["per_request"]) + math.ceil(math.log2(p)) * (c["latency"] + c["send"] + c["recv"])
        else:
            took = 2 * hops + 2 * (n - 1) / n * nbytes / c["bandwidth"]
        for d in self.daemons:
            self.sim.at(self.sim.now + took, lambda d=d, v=j[1]: self.cpu.post(d, c["recv"], lambda: d.arrive(-1, key, v)))

    def deliver(self, sender, peer, key, val, nbytes):
        d = self.daemons[peer]
        t = self.sim.now + self.c["latency"] + nbytes / self.c["bandwidth"]
        self.sim.at(t, lambda: self.cpu.post(d, self.c["recv"], lambda: d.arrive(sender.node, key, val)))

    def run(self):
        for d in self.daemons:
            self.cpu.post(d, 0.0, d.start)
        for r in self.ranks:
            r.start_step()
        marks = {}
        everyone = len(self.ranks)

        def done():
            if "start" not in marks and self.reached[self.warmup] == everyone:
                marks["start"] = self.sim.now
                marks["counts"] = [(d.coord_sent, d.cycles, d.cpu) for d in self.daemons]
            return self.reached[self.total_steps] == everyone
        self.sim.run(done)
        start = marks["start"]
        n = self.nodes
        coord = sum(d.coord_sent - c[0] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        busiest = max(d.coord_sent - c[0] for d, c in zip(self.daemons, marks["counts"])) / self.steps
        cycles = sum(d.cycles - c[1] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        cpu = sum(d.cpu - c[2] for d, c in zip(self.daemons, marks["counts"])) / n / self.steps
        row = {"mode": self.mode, "daemons": n, "ranks": self.rank_count,
               "step_us": (self.sim.now - start) / self.steps, "msgs_per_daemon_step": coord,
               "msgs_max_daemon_step": busiest, "cycles_per_step": cycles if self.mode != "topo" else 0.0,
               "engine_cpu_us_per_daemon_step": cpu}
        if self.compute > 0:
            measured = range(self.warmup, self.total_steps)
            slowest = sum(self.slowest[s] for s in measured) / self.steps
            mean = sum(self.mean_compute[s] for s in measured) / self.steps
            # Of a step: what is not the slowest rank's compute (the exchange, its coordination,
            # the tail after the last gradient), and what a mean rank does not compute (+ imbalance).
            row.update(compute_us=mean, slowest_compute_us=slowest, beyond_slowest=1 - slowest / row["step_us"],
                       idle_share=1 - mean / row["step_us"])
        return row


def simulate(nodes, mode, cores, costs, steps=200, warmup=20, ranks_per_node=1, nbytes=8, workload=None):
    return World(nodes, ranks_per_node, mode, cores, costs, steps, warmup, nbytes, workload).run()


def scaling_rows(paths):
    """bench/scaling.sh's rows from one or more runs (comma-separated files): per configuration
    the median of the runs' values, with their range."""
    runs = []
    for path in paths.split(","):
        line = [l for l in open(path) if l.startswith("{")][-1]
        runs.append({(r["label"], r["daemons"]): r for r in json.loads(line)["rows"]})
    rows = []
    for key in runs[0]:
        got = [run[key] for run in runs if key in run]
        row = dict(got[0])
        for f in ("step_us", "msgs_per_daemon_step", "cycles_per_step", "engine_cpu_us_per_daemon_step"):
            vals = sorted(r.get(f, 0.0) for r in got)
            row[f] = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
            row[f + "_range"] = [vals[0], vals[-1]]
        rows.append(row)
    return rows


def validate(paths, cores, costs, steps):
    out = []
    for r in scaling_rows(paths):
        s = simulate(r["daemons"], r["label"], cores, costs, steps)
        row = {"mode": r["label"], "daemons": r["daemons"], "real_step_us": r["step_us"], "sim_step_us": s["step_us"],
               "real_step_range": r["step_us_range"],
               "real_msgs": r["msgs_per_daemon_step"], "sim_msgs": s["msgs_per_daemon_step"],
               "real_cycles": r.get("cycles_per_step", 0.0), "sim_cycles": s["cycles_per_step"],
               "real_cpu_us": r["engine_cpu_us_per_daemon_step"], "sim_cpu_us": s["engine_cpu_us_per_daemon_step"]}
        row["step_err"] = s["step_us"] / r["step_us"] - 1 if r["step_us"] else 0.0
        row["msgs_err"] = (s["msgs_per_daemon_step"] / r["msgs_per_daemon_step"] - 1) if r["msgs_per_daemon_step"] >= 0.5 \
            else s["msgs_per_daemon_step"] - r["msgs_per_daemon_step"]
        lo, hi = r["step_us_range"]
        row["step_in_range"] = 0.85 * lo <= s["step_us"] <= 1.15 * hi  # within the real runs' spread, +-15 %
        out.append(row)
    return out


FIT_COSTS = ("daemon_wake", "rank_wake", "wake_per_sharer", "poll", "poll_per_peer", "recv", "send", "cycle", "submit", "latency")


def fit(paths, cores, costs, steps, modes):
    """Costs that bring the model nearest the real rows of `modes` (step time and coordination
    messages per step, squared log errors), by coordinate descent from `costs`."""
    rows = [r for r in scaling_rows(paths) if r["label"] in modes]

    def error(c):
        e = 0.0
        for r in rows:
            s = simulate(r["daemons"], r["label"], cores, c, steps)
            e += math.log(s["step_us"] / r["step_us"]) ** 2
            if r["msgs_per_daemon_step"] >= 0.5:
                e += math.log(max(s["msgs_per_daemon_step"], 1e-3) / r["msgs_per_daemon_step"]) ** 2
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


# A Summit-sized job (the paper's machine): 4,608 nodes x 6 V100s, a daemon per node on a core of
# its own, dual-rail EDR InfiniBand (about 23 GB/s a node, 1.5 us a hop). The step: ResNet-50's
# 161 gradients (25.6 M parameters, float32) handed over across the last two thirds of a 100 ms
# step (batch 32 on a V100), each rank slower by 2 % x |N(0,1)| per step. Per-message costs are
# this machine's (DEFAULT_COSTS or --cost). horovod: Horovod's controller before its response
# cache, every rank's request list to rank 0 each cycle (27,648 of them), rank 0 reading each,
# with Horovod 0.16's 5 ms cycle.
PREDICT = {"nodes": 4608, "ranks_per_node": 6, "costs": {"latency": 1.5, "bandwidth": 23000.0},
           "workload": {"compute_us": 100e3, "jitter": 0.02, "tensors": 161, "bytes": 25.6e6 * 4},
           "modes": ["negotiate", "gs", "nbcs", "topo", "horovod"], "horovod_cycle_us": 5000.0}
# The paper's Summit figures, as issue 36 quotes them: the background thread's overhead per
# step, Horovod's own coordination and with TOPO.
PAPER = {"horovod": 0.46, "topo": 0.034}


def predict(a):
    costs = dict(DEFAULT_COSTS)
    costs.update(PREDICT["costs"])
    for kv in a.cost:
        k, v = kv.split("=")
        costs[k] = float(v)
    nodes = int(a.nodes) if a.nodes.isdigit() else PREDICT["nodes"]
    modes = a.modes.split(",") if a.modes != "negotiate,gs,nbcs,topo" else PREDICT["modes"]
    rows = []
    print("# %-10s %7s %7s %9s %9s %9s %9s %9s %9s" % ("mode", "daemons", "ranks", "step ms", "slowest",
          "beyond", "idle", "msgs", "cycles"))
    for mode in modes:
        c = dict(costs, cycle_time=PREDICT["horovod_cycle_us"]) if mode == "horovod" else costs
        r = simulate(nodes, mode, 0, c, a.steps, a.warmup, PREDICT["ranks_per_node"], 8, PREDICT["workload"])
        rows.append(r)
        print("  %-10s %7d %7d %9.1f %9.1f %8.1f%% %8.1f%% %9.1f %9.1f" % (
            mode, r["daemons"], r["ranks"], r["step_us"] / 1e3, r["slowest_compute_us"] / 1e3,
            100 * r["beyond_slowest"], 100 * r["idle_share"], r["msgs_per_daemon_step"], r["cycles_per_step"]))
        sys.stdout.flush()
    print("# slowest: the slowest rank's compute per step (mean); beyond: the share of the step beyond it;"
          " idle: the share a mean rank does not compute; msgs: coordination messages per daemon per step")
    if a.plot:
        plot(rows, a.plot)
    print(json.dumps({"bench": "syncd_sim_predict", "costs": costs, "workload": PREDICT["workload"],
                      "paper": PAPER, "rows": rows}))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.6))
    modes = [r["mode"] for r in rows]
    x = range(len(modes))
    ax.bar([i - 0.2 for i in x], [100 * r["beyond_slowest"] for r in rows], 0.4, label="syncd model: beyond the slowest rank")
    ax.bar([i + 0.2 for i in x], [100 * PAPER.get(m, float("nan")) for m in modes], 0.4, label="paper, Summit (measured)")
    for i, m in enumerate(modes):
        if m in PAPER:
            ax.text(i + 0.2, 100 * PAPER[m], "%.1f %%" % (100 * PAPER[m]), ha="center", va="bottom", fontsize=8)
        ax.text(i - 0.2, 100 * rows[i]["beyond_slowest"], "%.1f %%" % (100 * rows[i]["beyond_slowest"]), ha="center",
                va="bottom", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(modes)
    ax.set_ylabel("overhead per step (%)")
    ax.set_title("4,608 nodes x 6 ranks, ResNet-50-sized steps: model vs Summit")
    top = max([100 * r["beyond_slowest"] for r in rows] + [100 * v for v in PAPER.values()])
    ax.set_ylim(0, 1.25 * top)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="2,4,8,16,32")
    ap.add_argument("--modes", default="negotiate,gs,nbcs,topo")
    ap.add_argument("--cores", type=int, default=2, help="shared cores for every thread; 0: one core each")
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=8)
    ap.add_argument("--cost", action="append", default=[], metavar="NAME=US", help="override a cost (see DEFAULT_COSTS)")
    ap.add_argument("--validate", metavar="SCALING_JSON[,...]",
                    help="compare with bench/scaling.sh's output (several runs: their median and range)")
    ap.add_argument("--fit", metavar="MODES", help="with --validate: first fit the costs to these modes' rows")
    ap.add_argument("--fit-on", metavar="SCALING_JSON[,...]", help="with --fit: fit on these runs (default: --validate's)")
    ap.add_argument("--compute-ms", type=float, default=0.0, help="training: each rank's compute per step (0: back to back)")
    ap.add_argument("--jitter", type=float, default=0.0, help="training: compute x (1 + jitter x |N(0,1)|) per rank and step")
    ap.add_argument("--tensors", type=int, default=1, help="gradients per step, handed over across the backward pass")
    ap.add_argument("--grad-mb", type=float, default=0.0, help="training: the gradients' bytes per step (MB), even split")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--predict", action="store_true",
                    help="Summit: 4,608 nodes x 6 ranks on dedicated cores, ResNet-50-sized steps (see PREDICT)")
    ap.add_argument("--plot", metavar="PNG", help="with --predict: the overhead per mode beside the paper's")
    a = ap.parse_args()
    costs = dict(DEFAULT_COSTS)
    if a.predict:
        return predict(a)
    for kv in a.cost:
        k, v = kv.split("=")
        if k not in costs:
            sys.exit("unknown cost %s (one of %s)" % (k, ", ".join(costs)))
        costs[k] = float(v)
    if a.validate:
        if a.fit:
            costs = fit(a.fit_on or a.validate, a.cores, costs, a.steps, a.fit.split(","))
        rows = validate(a.validate, a.cores, costs, a.steps)
        print("# %-10s %7s %11s %17s %11s %7s %9s %9s %7s %8s %8s %8s %8s" % ("mode", "daemons", "real us",
              "real range", "sim us", "err", "real msgs", "sim msgs", "err", "real cyc", "sim cyc", "real cpu", "sim cpu"))
        for r in rows:
            print("  %-10s %7d %11.1f %17s %11.1f %+6.0f%% %9.2f %9.2f %+6.0f%% %8.2f %8.2f %8.1f %8.1f" % (
                r["mode"], r["daemons"], r["real_step_us"], "%.0f-%.0f" % tuple(r["real_step_range"]), r["sim_step_us"],
                100 * r["step_err"], r["real_msgs"],
                r["sim_msgs"], 100 * r["msgs_err"], r["real_cycles"], r["sim_cycles"], r["real_cpu_us"], r["sim_cpu_us"]))
        within = sum(abs(r["step_err"]) <= 0.15 and abs(r["msgs_err"]) <= 0.15 for r in rows)
        in_range = sum(r["step_in_range"] and abs(r["msgs_err"]) <= 0.15 for r in rows)
        print("# %d of %d rows within 15 %% on both step time and messages per step (the runs' median); %d with the step"
              " time within the runs' range +-15 %%" % (within, len(rows), in_range))
        print(json.dumps({"bench": "syncd_sim_validation", "costs": costs, "cores": a.cores, "rows": rows}))
        return
    rows = []
    workload = {"compute_us": a.compute_ms * 1e3, "jitter": a.jitter, "tensors": a.tensors,
                "bytes": a.grad_mb * 1e6 if a.grad_mb else a.bytes * a.tensors}
    print("# %-10s %7s %7s %11s %10s %10s %8s %10s" % ("mode", "daemons", "ranks", "step us", "msgs", "max msgs",
                                                      "cycles", "cpu us"))
    for n in [int(x) for x in a.nodes.split(",")]:
        for mode in a.modes.split(","):
            r = simulate(n, mode, a.cores, costs, a.steps, a.warmup, a.ranks_per_node, a.bytes, workload)
            rows.append(r)
            print("  %-10s %7d %7d %11.1f %10.2f %10.2f %8.2f %10.1f" % (
                mode, n, r["ranks"], r["step_us"], r["msgs_per_daemon_step"], r["msgs_max_daemon_step"],
                r["cycles_per_step"], r["engine_cpu_us_per_daemon_step"]))
    print(json.dumps({"bench": "syncd_sim", "costs": costs, "cores": a.cores, "rows": rows}))


if __name__ == "__main__":
    main()
