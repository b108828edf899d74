"""The metrics endpoint against a real Prometheus server (Debian's `prometheus`), run on every rank
of a syncrun job whose daemons have `--metrics-port 0`:

    syncrun -N 2 -n 4 --syncd-arg=--metrics-port=0 -- python3 metrics_job.py

Every rank runs a known set of collectives. Rank 0 then checks each daemon's page with `promtool
check metrics`, starts Prometheus scraping every daemon each second, and asks its HTTP API (PromQL)
for the counters: each node must report exactly the collectives and bytes its ranks submitted.
The daemons' run directories are siblings under syncrun's (node0, node1, ...), each with the
endpoint's address in metrics.url. Exits 1 on any mismatch (every rank: rank 0's verdict is
broadcast).
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import torch

import syncd.torch as hvd

STEPS, ELEMENTS, GATHERS = 12, 1000, 2
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(SOURCE, "deploy", "grafana", "syncd-dashboard.json")
# Panels a job of allreduces and allgathers on every node must fill (the others: errors, stalls,
# compression may rightly be empty).
MUST_SHOW = ("Collectives per second", "Bytes per second", "Collective latency", "Ranks by state", "Daemon CPU",
             "Tensors per fused group")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    reply = json.loads(get(url))
    assert reply["status"] == "success", reply
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in reply["data"]["result"]}


def by_node(result):
    return {dict(k).get("node"): v for k, v in result.items()}


def check_dashboard(port, nodes):
    """The Grafana dashboard's queries name the daemon's real metrics (each a name the exporter
    writes, daemon/obs/prometheus.cc) and run on Prometheus against this job, the panels a job
    like this one must fill returning series."""
    with open(os.path.join(SOURCE, "daemon", "obs", "prometheus.cc")) as f:
        defined = set(re.findall(r'"(syncd_[a-z0-9_]+)"', f.read()))  # the names it writes
    with open(DASHBOARD) as f:
        panels = json.load(f)["panels"]
    must = MUST_SHOW + (("Peers connected",) if nodes > 1 else ())
    empty = []
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"]
            for name in re.findall(r"\b(syncd_[a-z0-9_]+)", expr):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert name in defined or base in defined, "panel '%s' queries %s, which syncd does not export" % (
                    panel["title"], name)
            promql = expr.replace("$job_id", ".*").replace("$__rate_interval", "1m")
            if not query(port, promql) and panel["title"].startswith(must):
                empty.append(panel["title"] + ": " + promql)
    return empty


def check(nodes, local_size):
    urls = sorted(open(f).read().strip() for f in glob.glob(os.path.join(os.path.dirname(os.environ["SYNCD_RUN_DIR"]),
                                                                         "*", "metrics.url")))
    assert len(urls) == nodes, "expected %d metrics.url files, found %s" % (nodes, urls)
    for url in urls:  # the exposition is well formed and follows Prometheus' naming conventions
        lint = subprocess.run(["promtool", "check", "metrics"], input=get(url), capture_output=True, text=True)
        assert lint.returncode == 0 and not lint.stdout.strip(), "promtool on %s: %s%s" % (url, lint.stdout, lint.stderr)
    work = tempfile.mkdtemp(prefix="syncd-prometheus-")
    port = free_port()
    targets = [urllib.parse.urlparse(u).netloc for u in urls]
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: syncd\n    static_configs:\n"
                "      - targets: [%s]\n" % ", ".join('"%s"' % t for t in targets))
    server = subprocess.Popen(["prometheus", "--config.file", os.path.join(work, "prometheus.yml"),
                               "--storage.tsdb.path", os.path.join(work, "data"),
                               "--web.listen-address", "127.0.0.1:%d" % port],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "log"), "w"))
    want_ops = {str(n): float(STEPS) for n in range(nodes)}
    want_bytes = {str(n): float(STEPS * ELEMENTS * 4 * local_size) for n in range(nodes)}
    got = {}
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(1)
            try:
                got = {
                    "up": query(port, 'up{job="syncd"}'),  # per instance: Prometheus' own series
                    "ops": by_node(query(port, 'syncd_collectives_total{kind="allreduce",process_set="0"}')),
                    "bytes": by_node(query(port, 'syncd_collective_bytes_total{kind="allreduce",process_set="0"}')),
                    "latency_count": by_node(query(port, 'syncd_collective_latency_seconds_count{kind="allreduce"}')),
                    "gathers": by_node(query(port, 'syncd_collectives_total{kind="allgather"}')),
                    "ranks": query(port, 'syncd_rank_requests_total'),
                    "jobs": query(port, 'count by (job_id) (syncd_nodes)'),
                    "p99": query(port, 'histogram_quantile(0.99, sum by (le) (syncd_collective_latency_seconds_bucket{kind="allreduce"}))'),
                }
            except (OSError, ValueError) as e:  # not ready yet
                got = {"error": repr(e)}
                continue
            # The queries run one after another, so a scrape can land between them: wait until every
            # answer has seen every daemon, not only the counters.
            if (got["ops"] == want_ops and got["gathers"] == {str(n): float(GATHERS) for n in range(nodes)}
                    and len(got["up"]) == nodes and len(got["ranks"]) == nodes * local_size
                    and len(got["p99"]) == 1):
                break
        print("prometheus saw:", got, flush=True)
        assert got.get("ops") == want_ops, "allreduces per node: %s, expected %s" % (got.get("ops"), want_ops)
        assert got["bytes"] == want_bytes, "allreduce bytes per node: %s, expected %s" % (got["bytes"], want_bytes)
        assert got["latency_count"] == want_ops, got["latency_count"]
        assert len(got["up"]) == nodes and all(v == 1.0 for v in got["up"].values()), got["up"]  # every daemon scraped
        ranks = {dict(k)["rank"]: v for k, v in got["ranks"].items()}
        assert sorted(ranks) == [str(r) for r in range(hvd.size())], ranks  # every rank, labelled
        assert all(v >= STEPS + GATHERS for v in ranks.values()), ranks
        assert len(got["jobs"]) == 1 and list(got["jobs"].values()) == [float(nodes)], got["jobs"]  # one job label
        p99 = list(got["p99"].values())
        assert len(p99) == 1 and 0 < p99[0] < 10, p99
        deadline = time.time() + 20  # rate() needs two scrapes of a series in its window
        while check_dashboard(port, nodes) and time.time() < deadline:
            time.sleep(1)
        empty = check_dashboard(port, nodes)
        assert not empty, "dashboard panels without data: %s" % empty
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def main():
    hvd.init()
    # The ranks start seconds apart under load (ASan, CI): a barrier first, so that an allreduce's
    # latency is the collective's own, not the wait for the last rank to import torch.
    hvd.barrier()
    for i in range(STEPS):
        hvd.allreduce(torch.full((ELEMENTS,), float(hvd.rank())), name="metrics.grad%d" % (i % 3))
    for i in range(GATHERS):
        hvd.allgather(torch.ones(3), name="metrics.gather%d" % i)
    hvd.barrier()
    ok = 1
    if hvd.rank() == 0:
        try:
            check(hvd.cross_size(), hvd.local_size())
        except Exception as e:  # every rank must hear the verdict, so no raise here
            print("metrics check failed: %s" % e, file=sys.stderr, flush=True)
            ok = 0
    ok = int(hvd.broadcast(torch.tensor([ok]), root_rank=0, name="metrics.verdict").item())
    rank = hvd.rank()
    hvd.shutdown()
    if rank == 0 and ok:
        print("metrics: Prometheus scraped every daemon and the counters match", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
