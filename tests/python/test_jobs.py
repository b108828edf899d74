"""Whole syncd.torch jobs launched through syncrun: coord modes agree bit for bit, TOPO is
registered from autograd and used, a lost rank raises on the survivors, Slurm's environment works."""
import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch

from conftest import BUILD, ROOT

BIN = os.environ.get("SYNCD_BIN_DIR", os.path.join(BUILD, "bin"))
JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")


def syncrun(nodes, ranks, script, *args, syncd_args=(), env=None, timeout=240, shell_prefix=None, launcher_args=()):
    cmd = [os.path.join(BIN, "syncrun"), "-N", str(nodes), "-n", str(ranks), "--syncd-arg=--log-level=warn"]
    cmd += list(launcher_args)
    cmd += ["--syncd-arg=%s" % a for a in syncd_args]
    cmd += ["--"] + (shell_prefix or []) + [sys.executable, os.path.join(JOBS, script)] + list(args)
    with tempfile.TemporaryDirectory() as results_dir:
        full_env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"), SYNCD_BIN_DIR=BIN,
                        SYNCD_TEST_RESULTS=results_dir)
        full_env.update(env or {})
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
        results = []
        for f in sorted(os.listdir(results_dir)):
            with open(os.path.join(results_dir, f)) as fh:
                results.append(fh.read())
    return p, results


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    runs = {}
    for mode in ("negotiate", "topo"):
        out = tmp_path_factory.mktemp(mode)
        p, results = syncrun(2, 4, "train_steps.py", str(out), "25", syncd_args=["--coord=%s" % mode])
        assert p.returncode == 0, p.stdout + p.stderr
        runs[mode] = (out, [json.loads(r) for r in results])
    return runs


def test_topo_training_is_bit_identical_to_negotiate(trained):
    for r in range(4):
        a = torch.load(os.path.join(trained["negotiate"][0], "rank%d.pt" % r))
        b = torch.load(os.path.join(trained["topo"][0], "rank%d.pt" % r))
        for k in a:
            assert torch.equal(a[k], b[k]), "rank %d, %s differs between negotiate and topo" % (r, k)
    ref = torch.load(os.path.join(trained["topo"][0], "rank0.pt"))
    for r in range(1, 4):
        other = torch.load(os.path.join(trained["topo"][0], "rank%d.pt" % r))
        assert all(torch.equal(ref[k], other[k]) for k in ref), "ranks diverged"


def test_topo_plan_is_registered_from_autograd_and_runs_every_later_step(trained):
    infos = trained["topo"][1]
    assert len(infos) == 4
    assert {i["mode"] for i in infos} == {"topo"}
    hashes = {i["plan_hash"] for i in infos}
    assert len(hashes) == 1 and None not in hashes
    daemons = [i["status"] for i in infos if "status" in i]
    assert len(daemons) == 2
    for status in daemons:
        topo = status["topo"]
        assert topo["in_use"] is True
        assert int(topo["plan_tensors"]) == 6  # 3 layers with weights and biases
        assert int(topo["plan_gpu_tensors"]) == 0  # recorded from the gradients: host memory
        assert int(topo["steps"]) >= 24  # every step after the recorded first one
        assert int(topo["fallback_tensors"]) == 0
    negotiate = [i for i in trained["negotiate"][1] if "status" in i]
    assert all(i["plan_hash"] is None for i in trained["negotiate"][1])
    assert all(not i["status"].get("topo", {}).get("in_use", False) for i in negotiate)


@pytest.mark.parametrize("method", ["fp16", "topk", "powersgd"])
def test_topo_carries_each_compression_and_is_bit_identical_to_negotiate(tmp_path, method):
    """DistributedOptimizer(compression=fp16, topk(0.05), powersgd(rank=2)) under --coord topo: the
    plan recorded from autograd carries each gradient's compression with its ratio or rank, the
    daemons compress every planned step's inter-node hop at it, and the job ends bit-identical to
    the same job negotiated."""
    runs = {}
    for mode in ("negotiate", "topo"):
        out = tmp_path / mode
        out.mkdir()
        p, results = syncrun(2, 4, "train_steps.py", str(out), "10", method, syncd_args=["--coord=%s" % mode])
        assert p.returncode == 0, p.stdout + p.stderr
        runs[mode] = (out, [json.loads(r) for r in results])
    for r in range(4):
        a = torch.load(os.path.join(runs["negotiate"][0], "rank%d.pt" % r))
        b = torch.load(os.path.join(runs["topo"][0], "rank%d.pt" % r))
        assert all(torch.equal(a[k], b[k]) for k in a), "rank %d differs between negotiate and topo" % r
    wire = {}
    for mode, (_, infos) in runs.items():
        for status in [i["status"] for i in infos if "status" in i]:
            counted = [c for c in status["compressed"] if c["compression"] == method]
            assert counted and int(counted[0]["tensors"]) == 6 * 10, (mode, status["compressed"])  # 6 gradients, 10 steps
            wire.setdefault(mode, set()).add(int(counted[0]["wire_bytes"]))
            if mode == "topo":
                assert status["topo"]["in_use"] is True and int(status["topo"]["fallback_tensors"]) == 0, status
                assert int(status["topo"]["plan_tensors"]) == 6, status
    # The same ratio or rank crossed the nodes: fp16's and PowerSGD's bytes are each tensor's,
    # top-k's each fused segment's (its blocks are rounded per segment, and the negotiated job's
    # fusion follows timing): within 5 % (at the daemons' default ratio, 0.01, 5x fewer).
    assert all(abs(t - n) <= (0.05 * n if method == "topk" else 0) for t in wire["topo"] for n in wire["negotiate"]), wire


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_topo_on_the_gpu_with_a_metric_outside_the_plan_is_bit_identical_to_negotiate(tmp_path):
    # One node (two ranks on one GPU): a GPU job's plan groups and a negotiated GPU tensor each step.
    runs = {}
    for mode in ("negotiate", "topo"):
        out = tmp_path / mode
        out.mkdir()
        p, results = syncrun(1, 2, "train_steps.py", str(out), "15", "cuda", "metric",
                             syncd_args=["--coord=%s" % mode])
        assert p.returncode == 0, p.stdout + p.stderr
        runs[mode] = (out, [json.loads(r) for r in results])
    for r in range(2):
        a = torch.load(os.path.join(runs["negotiate"][0], "rank%d.pt" % r))
        b = torch.load(os.path.join(runs["topo"][0], "rank%d.pt" % r))
        for k in a:
            assert torch.equal(a[k], b[k]), "rank %d, %s differs between negotiate and topo" % (r, k)
    (status,) = [i["status"] for i in runs["topo"][1] if "status" in i]
    assert status["topo"]["in_use"] is True
    assert int(status["topo"]["plan_gpu_tensors"]) == 6  # the recorder saw every gradient on the GPU
    assert int(status["topo"]["steps"]) >= 14
    assert int(status["topo"]["fallback_tensors"]) >= 14  # the metric, every step after registration
    assert int(status["gpu"]["allreduces"]) >= 14 * 2


def test_a_lost_rank_raises_on_every_survivor():
    p, results = syncrun(2, 4, "lost_peer.py", timeout=120)
    assert len(results) == 3, p.stdout + p.stderr
    assert all(r.startswith("raised RANK_LOST") for r in results), results
    assert all("orphaned" in r for r in results), results


@pytest.mark.parametrize("mode", ["negotiate", "topo"])
def test_with_on_loss_continue_a_horovod_job_trains_on_after_a_rank_dies_mid_backward(mode):
    """syncrun --on-loss continue: rank 2 SIGKILLs itself inside its backward pass at step 8; the
    three survivors train all 30 steps, end with identical parameters, keep hvd.size() == 4, and
    their first step without it ends within 2 s of the kill; syncrun exits 0; the timeline marks it."""
    with tempfile.TemporaryDirectory() as d:
        timeline = os.path.join(d, "timeline.json")
        p, results = syncrun(2, 4, "train_through_loss.py", "30", "2", "8",
                             syncd_args=["--coord=%s" % mode, "--timeline=%s" % timeline],
                             launcher_args=["--on-loss", "continue"], timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        with open(timeline) as f:
            marks = [e["name"] for e in json.load(f) if e.get("ph") == "i"]
    # The job-wide timeline (node 0's file) marks the loss on node 1.
    assert any(m.startswith("rank 2 lost:") and m.endswith("the job goes on without it") for m in marks), marks
    assert "rank 2 killed by signal" in p.stderr + p.stdout and "goes on without it" in p.stderr + p.stdout
    killed_at = float(next(r for r in results if not r.startswith("{")))
    ranks = [json.loads(r) for r in results if r.startswith("{")]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 3], p.stdout + p.stderr
    assert all(r["size"] == 4 for r in ranks)
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"
    for r in ranks:
        assert len(r["ends"]) == 30
        after = [t for t in r["ends"] if t > killed_at]
        assert after and after[0] - killed_at < 2.0, (r["rank"], after[:1], killed_at)
        assert r["losses"][-1] < 0.8 * r["losses"][0], r["losses"]  # it still learns


def ranks_of(results):
    """The JSON reports of the ranks that finished, by rank (other result files, such as a
    victim's killed.txt, left out)."""
    return sorted((r for r in map(json.loads, results) if "rank" in r), key=lambda r: r["rank"])


# The policies as users pick them: syncrun --elastic (restore: roll back to the last commit) and
# --on-loss continue.
POLICIES = {"restore": ["--elastic"], "continue": ["--on-loss", "continue"]}


def failed_ops(ranks):
    """Each rank's checks of check_ops() that did not come out True."""
    return [{k: v for k, v in r["ops"].items() if v is not True} for r in ranks]


ELASTIC_OPS = ["alltoall_splits", "alltoall_equal", "reducescatter", "allgather", "broadcast", "params_min_max",
               "product"]


@pytest.mark.parametrize("nodes,victim,mode,policy", [(2, 1, "negotiate", "continue"), (4, 0, "negotiate", "continue"),
                                                      (2, 3, "topo", "continue"), (2, 1, "negotiate", "restore"),
                                                      (4, 0, "negotiate", "restore"), (2, 3, "topo", "restore")])
def test_horovods_elastic_synthetic_benchmark_goes_on_after_a_rank_is_killed(nodes, victim, mode, policy):
    """Horovod's pytorch_synthetic_benchmark_elastic.py (rewritten to the same API, small): a rank
    killed mid-backward; every survivor sees one reset, is renumbered 0..2 in launch order with
    hvd.size() == 3 (the reset callback scales the learning rate by it), ends with the same
    parameters and exits 0, as does syncrun. alltoall (splits, received splits), reducescatter,
    allgather and broadcast then number the ranks as hvd.rank() does."""
    p, results = syncrun(nodes, 4, "elastic_synthetic.py", "--die-rank", str(victim), "--die-at-iter", "3", "--ops",
                         syncd_args=["--coord=%s" % mode], launcher_args=POLICIES[policy], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = ranks_of(results)
    assert [r["rank"] for r in ranks] == [0, 1, 2], p.stdout + p.stderr
    assert [r["launch_rank"] for r in ranks] == [r for r in range(4) if r != victim]
    assert all(r["size"] == 3 and r["resets"] == 1 and abs(r["lr"] - 0.03) < 1e-12 for r in ranks), ranks
    assert all(r["iters"] >= 8 for r in ranks), ranks
    assert all(r["ops"] == dict.fromkeys(ELASTIC_OPS, True) for r in ranks), failed_ops(ranks)
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"


@pytest.mark.parametrize("nodes,victim,mode,policy", [(2, 2, "negotiate", "restore"), (2, 3, "topo", "continue"),
                                                      (4, 0, "negotiate", "restore")])
def test_horovods_elastic_synthetic_benchmark_goes_on_after_a_nodes_daemon_is_killed(nodes, victim, mode, policy):
    """The same benchmark; a rank SIGKILLs its node's daemon mid-backward (node 0's, the
    coordinator, on 4 x 1): that node's ranks cannot go on and exit; the others' calls in flight
    fail, hvd.elastic.run rolls back, acknowledges the job's new membership and renumbers them
    0..n-1 in launch order; they end with the same parameters and syncrun exits 0. The collectives
    that name ranks number them as hvd.rank() does, over the job's global set made afresh."""
    p, results = syncrun(nodes, 4, "elastic_synthetic.py", "--die-rank", str(victim), "--die-at-iter", "3",
                         "--ops", "--kill-daemon", syncd_args=["--coord=%s" % mode], launcher_args=POLICIES[policy],
                         timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lost_node = victim // (4 // nodes)
    left = [r for r in range(4) if r // (4 // nodes) != lost_node]
    ranks = ranks_of(results)
    assert [r["launch_rank"] for r in ranks] == left, p.stdout + p.stderr
    assert [r["rank"] for r in ranks] == list(range(len(left)))
    assert all(r["size"] == len(left) and r["resets"] == 1 for r in ranks), ranks
    assert all(abs(r["lr"] - 0.01 * len(left)) < 1e-12 for r in ranks), ranks
    assert all(r["ops"] == dict.fromkeys(ELASTIC_OPS, True) for r in ranks), failed_ops(ranks)
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"
    assert "the job goes on without the node" in p.stdout + p.stderr


@pytest.mark.parametrize("nodes,policy,mode", [(2, "restore", "negotiate"), (2, "continue", "topo"),
                                               (4, "restore", "negotiate"), (4, "continue", "nbcs")])
def test_horovods_elastic_synthetic_benchmark_takes_a_replacement_under_respawn(nodes, policy, mode):
    """syncrun --elastic --respawn: rank 1 killed mid-backward; a replacement (the same script)
    starts, joins the three others at their next commit (they get HostsUpdatedInterrupt, it gets
    the state from rank 0) within 10 s of the kill; all four end with the same parameters, size 4
    and the learning rate scaled back to 4 ranks; syncrun exits 0. On 4 x 1 the replacement's node
    had lost its every rank: the daemons take the node back (the others roll back once more)."""
    launcher = ["--elastic", "--respawn"] + (["--on-loss", "continue"] if policy == "continue" else [])
    p, results = syncrun(nodes, 4, "elastic_synthetic.py", "--die-rank", "1", "--die-at-iter", "3", "--num-iters", "30",
                         "--sleep-ms", "50", "--wait-for-size", "4", syncd_args=["--coord=%s" % mode],
                         launcher_args=launcher, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "a replacement starts (--respawn, 1 of 3)" in p.stdout + p.stderr
    killed_at = next(r["killed_at"] for r in map(json.loads, results) if "killed_at" in r)
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 4) for r in range(4)], ranks
    assert [r["replacement"] for r in ranks] == [False, True, False, False], ranks
    assert all(abs(r["lr"] - 0.04) < 1e-12 for r in ranks), ranks
    assert len({r["digest"] for r in ranks}) == 1, "the replacement's parameters differ from the others'"
    joined_s = ranks[1]["first_step_at"] - killed_at
    assert 0 < joined_s < 10, joined_s


def grow_to_max_np(nodes, ranks, max_np, grown, policy, mode, iters):
    """Horovod's elastic synthetic benchmark under syncrun --elastic --max-np: the discovery script
    offers one slot on each of nodes 0 and 1 until rank 0 writes `grown` at iteration 3."""
    with tempfile.TemporaryDirectory() as d:
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            f.write("node0:1\nnode1:1\n")
        launcher = ["--elastic", "--max-np", str(max_np), "--host-discovery-script", "cat " + hosts,
                    "--discovery-interval", "0.2"] + (["--on-loss", "continue"] if policy == "continue" else [])
        return syncrun(nodes, ranks, "elastic_synthetic.py", "--grow-file", hosts, "--grow-hosts", grown,
                       "--grow-at-iter", "3", "--num-iters", str(iters), "--sleep-ms", "50",
                       "--wait-for-size", str(max_np), syncd_args=["--coord=%s" % mode], launcher_args=launcher,
                       timeout=180)


@pytest.mark.parametrize("policy,mode", [("restore", "negotiate"), ("continue", "topo"), ("restore", "nbcs")])
def test_horovods_elastic_synthetic_benchmark_grows_to_max_np_when_host_discovery_offers_slots(policy, mode):
    """syncrun --elastic -N 2 -n 2 --max-np 4 --host-discovery-script: ranks 0 and 2 start (one per
    node, numbered 0 and 1 of 2); at iteration 3 rank 0 has the script offer two slots per node;
    syncrun starts ranks 1 and 3 in the vacant slots, they join the others at their next commit
    (HostsUpdatedInterrupt, the state from rank 0), and all four end with size 4, their launch
    ranks, the learning rate scaled to 4 and the same parameters; syncrun exits 0 and syncctl-style
    status counted no loss."""
    p, results = grow_to_max_np(2, 2, 4, "node0:2,node1:2", policy, mode, iters=30)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "host discovery offers node 0 2 slots; starting rank 1" in out, out
    assert "host discovery offers node 1 2 slots; starting rank 3" in out, out
    assert "lost" not in out.lower(), out
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 4) for r in range(4)], ranks
    assert [r["replacement"] for r in ranks] == [False, True, False, True], ranks
    assert [r["start_size"] for r in (ranks[0], ranks[2])] == [2, 2], ranks
    assert all(abs(r["lr"] - 0.04) < 1e-12 for r in ranks), ranks
    assert len({r["digest"] for r in ranks}) == 1, "the new ranks' parameters differ from the others'"
    # A reset for each commit that saw new ranks (the two may come at one commit or at two); under
    # restore the vacant slots failed nothing, so no more.
    assert all(1 <= r["resets"] <= 2 for r in ranks), [r["resets"] for r in ranks]


@pytest.mark.parametrize("policy,mode", [("restore", "nbcs"), ("continue", "negotiate"), ("continue", "topo")])
def test_a_node_started_without_ranks_joins_the_job_when_host_discovery_offers_it(policy, mode):
    """syncrun --elastic -N 3 -n 2 --max-np 6: ranks 0 and 2 start on nodes 0 and 1; node 2 has no
    rank (its daemon starts the job from --job-id and stands in for its slots). At iteration 3 the
    script offers every slot; syncrun starts ranks 1, 3, 4 and 5; the daemons take node 2 into the
    job's collectives when its first rank attaches (a membership change every rank acknowledges).
    All six end with size 6, their launch ranks, the learning rate scaled to 6 and the same
    parameters; nothing was lost, and the only warnings are the calls in flight failing for the join."""
    p, results = grow_to_max_np(3, 2, 6, "node0:2,node1:2,node2:2", policy, mode, iters=20)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "host discovery offers node 2 2 slots; starting rank 4" in out, out
    assert "[error]" not in out and "syncrun: rank" not in out, out
    # What was in flight when node 2 joined failed (said once per tensor); nothing else warned.
    warnings = [line for line in out.splitlines() if "[warning]" in line]
    assert all("node 2 joins: a new rank attached in a vacant slot there" in w for w in warnings), warnings
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 6) for r in range(6)], ranks
    assert [r["replacement"] for r in ranks] == [False, True, False, True, True, True], ranks
    assert [r["start_size"] for r in (ranks[0], ranks[2])] == [2, 2], ranks
    assert all(abs(r["lr"] - 0.06) < 1e-12 for r in ranks), ranks
    assert len({r["digest"] for r in ranks}) == 1, "the new ranks' parameters differ from the others'"


def test_syncrun_refuses_max_np_it_cannot_lay_out():
    """--max-np that does not spread evenly over the nodes, or is below -n, or comes without a
    host discovery script, is refused before anything starts, saying what to change."""
    for args, why in ((["-N", "2", "-n", "2", "--max-np", "5"], "do not spread evenly over 2 nodes"),
                      (["-N", "2", "-n", "4", "--max-np", "2"], "--max-np 2 is below -n 4"),
                      (["-N", "2", "-n", "2", "--max-np", "4"], "needs --host-discovery-script"),
                      (["-N", "3", "-n", "2"], "every node needs a rank (or give --max-np")):
        extra = [] if why.startswith("needs") else ["--host-discovery-script", "true"]
        p = subprocess.run([os.path.join(BIN, "syncrun"), "--elastic"] + args + extra + ["--", "true"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and why in p.stderr, (args, p.returncode, p.stderr)


@pytest.mark.parametrize("nodes,victim,mode,policy", [(2, 2, "negotiate", "restore"), (2, 3, "topo", "continue"),
                                                      (4, 3, "negotiate", "restore"), (4, 1, "nbcs", "continue")])
def test_horovods_elastic_synthetic_benchmark_attaches_again_under_restart_daemons(nodes, victim, mode, policy):
    """syncrun --elastic --restart-daemons (systemd's Restart= role): a rank SIGKILLs its node's
    daemon mid-backward; syncrun starts it again with the same arguments; the node's ranks (the
    same processes) attach to it again inside hvd.elastic.run and the job takes the node back:
    every rank ends with its launch rank, size 4, the learning rate scaled back to 4 ranks and the
    same parameters, and syncrun exits 0."""
    launcher = ["--elastic", "--restart-daemons"] + (["--on-loss", "continue"] if policy == "continue" else [])
    p, results = syncrun(nodes, 4, "elastic_synthetic.py", "--die-rank", str(victim), "--die-at-iter", "3",
                         "--num-iters", "12", "--sleep-ms", "50", "--kill-daemon", syncd_args=["--coord=%s" % mode],
                         launcher_args=launcher, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    node = victim // (4 // nodes)
    assert "syncd of node %d killed by signal Killed while the job was running; starting it again " \
           "(--restart-daemons, 1 of 3)" % node in out, out
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 4) for r in range(4)], out
    assert [r["attached_again"] for r in ranks] == [r // (4 // nodes) == node for r in range(4)], ranks
    assert all(abs(r["lr"] - 0.04) < 1e-12 and r["iters"] >= 12 for r in ranks), ranks
    assert len({r["digest"] for r in ranks}) == 1, "the ranks' parameters differ"


def test_restart_daemons_does_not_restart_node_0_and_stops_its_ranks():
    """Node 0's daemon serves the job's rendezvous: syncrun --restart-daemons does not start it
    again, says why, and stops its ranks at once (they would wait SYNCD_REATTACH_S for it); the
    other node's ranks go on as without --restart-daemons."""
    p, results = syncrun(2, 4, "elastic_synthetic.py", "--die-rank", "0", "--die-at-iter", "3", "--kill-daemon",
                         launcher_args=["--elastic", "--restart-daemons"], timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "not started again: node 0's daemon serves the job's rendezvous" in out, out
    assert "rank 1 killed by signal Killed" in out, out
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(0, 2, 2), (1, 3, 2)], out
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"


@pytest.mark.parametrize("limit", [1, 2])
def test_syncrun_stops_an_elastic_job_past_its_reset_limit(limit):
    """syncrun --elastic --respawn --reset-limit N (horovodrun's --reset-limit): rank 1 killed
    mid-run; its loss and its replacement change the job's ranks twice. Limit 1: syncrun stops the
    job before any replacement starts and exits non-zero, saying why; limit 2: the job ends well,
    the replacement in it."""
    wait = ["--wait-for-size", "4"] if limit == 2 else []  # CI once started the replacement after the last step
    p, results = syncrun(2, 4, "elastic_synthetic.py", "--die-rank", "1", "--die-at-iter", "3", "--num-iters", "30",
                         "--sleep-ms", "50", *wait, launcher_args=["--elastic", "--respawn", "--reset-limit", str(limit)],
                         timeout=180)
    out = p.stdout + p.stderr
    if limit == 1:
        assert p.returncode != 0, out
        assert "2 changes of the job's ranks, more than --reset-limit 1 allows; stopping the job" in out, out
        assert "a replacement starts" not in out, out
    else:
        assert p.returncode == 0, out
        assert "a replacement starts (--respawn, 1 of 3)" in out, out
        assert [r["replacement"] for r in ranks_of(results)] == [False, True, False, False], results


def test_digits_train_with_adasum_within_the_accuracy_band_of_average():
    """The quickstart's digits network with DistributedOptimizer(op=hvd.Adasum) (Horovod's Adasum
    optimizer: each rank's update, combined by the daemons) on 2 x 2 reaches at least 95 % held-out
    accuracy, within 2 points of op=Average from the same seed."""
    script = os.path.join(ROOT, "deploy", "local", "train_digits.py")
    accuracy = {}
    for op in ("average", "adasum"):
        p, _ = syncrun(2, 4, script, "--op", op, "--json", "--no-status", timeout=180)
        assert p.returncode == 0, p.stdout + p.stderr
        line = next(l for l in p.stdout.splitlines() if l.startswith('{"bench": "digits"'))
        accuracy[op] = json.loads(line)["accuracy_pct"]
    assert accuracy["adasum"] >= 95.0 and abs(accuracy["adasum"] - accuracy["average"]) <= 2.0, accuracy


def test_horovods_elastic_mnist_takes_a_replacement_under_respawn():
    """pytorch_mnist_elastic.py (as below) under syncrun --elastic --respawn: rank 2 killed
    mid-backward in epoch 2; its replacement joins at the others' next commit, gets the model,
    optimizer and sampler state from rank 0, and the four finish every epoch with the same test
    accuracy, far above chance; syncrun exits 0. The survivors wait for it before the last epoch
    (a loaded machine starts it late: in CI it once came only during the last epoch)."""
    p, results = syncrun(2, 4, "elastic_mnist.py", "--die-rank", "2", "--die-at-epoch", "2", "--die-at-batch", "3",
                         "--epochs", "5", "--sleep-ms", "100", "--wait-for-size", "4", launcher_args=["--elastic", "--respawn"],
                         timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 4) for r in range(4)], ranks
    assert [r["replacement"] for r in ranks] == [False, False, True, False], ranks
    assert len({r["accuracy"] for r in ranks}) == 1 and ranks[0]["accuracy"] > 0.6, ranks
    assert all(r["samples_per_rank"] == 256 for r in ranks), ranks  # the last epoch over four again


@pytest.mark.parametrize("policy", ["continue", "restore"])
def test_horovods_elastic_mnist_with_an_elastic_sampler_learns_through_a_rank_killed_mid_epoch(policy):
    """Horovod's pytorch_mnist_elastic.py (rewritten to the same API, synthetic MNIST-shaped data,
    hvd.elastic.ElasticSampler in the TorchState): rank 2 killed mid-backward in epoch 2; the
    survivors re-shard what is left of the epoch, finish every epoch, exit 0 and agree on a test
    accuracy far above chance."""
    p, results = syncrun(2, 4, "elastic_mnist.py", "--die-rank", "2", "--die-at-epoch", "2", "--die-at-batch", "3",
                         launcher_args=POLICIES[policy], timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = ranks_of(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(0, 0, 3), (1, 1, 3), (2, 3, 3)], ranks
    assert len({r["accuracy"] for r in ranks}) == 1 and ranks[0]["accuracy"] > 0.6, ranks
    # continue: epoch 2 had 4 of its 8 batches of 32 done on 3 survivors when the loss reached the
    # next commit: what is left (1024 - 3 * 128 = 640) is re-sharded over 3 (214 each). restore: the
    # batch in flight is rolled back to the commit after 3 batches: 1024 - 3 * 96 = 736 left, 246
    # each. Epoch 3 is 342 each.
    left = 214 if policy == "continue" else 246
    assert all(r["samples_per_rank"] == 342 and r["processed_after_loss"] == left + 342 for r in ranks), ranks


def test_torch_distributed_over_syncd_raises_on_every_survivor_of_a_lost_rank():
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    p, results = syncrun(2, 4, "c10d_lost_peer.py", timeout=120)
    assert len(results) == 3, p.stdout + p.stderr
    assert all(r.startswith("raised after") for r in results), results
    assert all("rank 3" in r for r in results), results


# Rank 3 dies (lost_peer, on 1 and 2 nodes) or leaves cleanly and does not come back within the
# daemon's 2 s grace (departed_peer; 1 node: a daemon does not tell the others of a clean
# departure, see point_to_point.h) while the others wait in a recv from it.
@pytest.mark.parametrize("nodes,script,names_it", [
    (1, "c10d_p2p_lost_peer.py", lambda r: "rank 3" in r),
    (2, "c10d_p2p_lost_peer.py", lambda r: "rank 3" in r),
    (1, "c10d_p2p_departed_peer.py", lambda r: "rank 3 (pid" in r and "did not attach again within 2 s" in r),
], ids=["died-1x4", "died-2x2", "left_cleanly-1x4"])
def test_torch_distributed_recv_from_a_rank_that_is_gone_raises_naming_it(nodes, script, names_it):
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    p, results = syncrun(nodes, 4, script, timeout=120)
    assert len(results) == 3, p.stdout + p.stderr
    assert all(r.startswith("raised after") for r in results), results
    assert all(names_it(r) for r in results), results
    assert all(float(r.split()[2]) < 20 for r in results), results  # the daemons, not the 60 s timeout


def test_torch_distributed_survivors_of_a_killed_daemon_raise_naming_it():
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    p, results = syncrun(2, 4, "c10d_daemon_lost.py", timeout=120)
    assert len(results) == 4, p.stdout + p.stderr
    assert all(r.startswith("raised after") for r in results), results
    assert all(float(r.split()[2]) < 20 for r in results), results  # the daemons, not the 60 s timeout
    # Ranks 2 and 3 lost their own daemon; ranks 0 (in a recv) and 1 hear that node 1 is gone.
    assert sum("syncd daemon at" in r and "is gone" in r for r in results) == 2, results
    assert sum("lost node 1" in r for r in results) == 2, results
    assert any("RECV failed: recv of tensor" in r and "lost node 1" in r for r in results), results


def test_torch_distributed_without_a_daemon_raises_naming_the_run_directory(tmp_path):
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    script = ("import torch.distributed as dist, syncd.torch.distributed\n"
              "dist.init_process_group('syncd')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNCD_")}
    env.update(PYTHONPATH=os.path.join(BUILD, "python"), SYNCD_RUN_DIR=str(tmp_path), RANK="0", WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0
    assert "could not attach to a syncd daemon (SYNCD_RUN_DIR=%s)" % tmp_path in p.stderr, p.stderr
    assert "is the daemon running?" in p.stderr, p.stderr


def test_torch_distributed_over_syncd_honours_the_init_timeout():
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    p, results = syncrun(1, 3, "c10d_timeout.py", timeout=120)
    raised = [r for r in results if r.startswith("raised")]
    assert len(raised) == 2, results
    for r in raised:
        seconds = float(r.split()[2])
        assert 2.5 <= seconds <= 6.0 and "3000 ms" in r, r


def test_slurm_environment_is_enough_to_attach():
    prefix = ["sh", "-c", 'exec env -u SYNCD_RANK -u SYNCD_SIZE -u SYNCD_LOCAL_RANK -u SYNCD_LOCAL_SIZE '
              'SLURM_PROCID=$SYNCD_RANK SLURM_NTASKS=$SYNCD_SIZE SLURM_LOCALID=$SYNCD_LOCAL_RANK '
              'SLURM_NODEID=0 SLURM_TASKS_PER_NODE="3" "$@"', "sh"]
    p, results = syncrun(1, 3, "slurm_env.py", shell_prefix=prefix, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = sorted(results)
    assert got == ["%d 3 %d 3 [6.0, 6.0]" % (r, r) for r in range(3)], got


def test_slurm_environment_is_enough_for_torch_distributed():
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    prefix = ["sh", "-c", 'exec env -u SYNCD_RANK -u SYNCD_SIZE -u SYNCD_LOCAL_RANK -u SYNCD_LOCAL_SIZE '
              '-u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT '
              'SLURM_PROCID=$SYNCD_RANK SLURM_NTASKS=$SYNCD_SIZE SLURM_LOCALID=$SYNCD_LOCAL_RANK '
              'SLURM_NODEID=0 SLURM_TASKS_PER_NODE="3" SLURM_JOB_NODELIST=localhost '
              'SLURM_JOB_ID=$(( $SYNCD_JOB_ID % 10000 + 3000 )) "$@"', "sh"]
    p, results = syncrun(1, 3, "c10d_slurm_env.py", shell_prefix=prefix, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(results) == ["%d 3 localhost 6.0" % r for r in range(3)], results


def c10d_reports(results):
    return sorted((r for r in map(json.loads, results) if "rank" in r), key=lambda r: r["rank"])


C10D_OPS = ["broadcast", "all_reduce", "all_gather", "reduce", "gather", "scatter", "reduce_scatter",
            "all_to_all_single", "send_recv", "recv_any_source", "new_group"]


def steps_averaged_right(report, policy):
    """Every step's gradient was the mean over the group's ranks of the time; under continue the
    step in flight at the loss (no rollback) sums the survivors over the old world size."""
    return all(ok for _, ok, settled in report["checked"] if settled or policy == "restore")


@pytest.mark.parametrize("nodes,victim,policy", [(2, 1, "restore"), (2, 3, "continue"), (1, 0, "restore"),
                                                 (4, 1, "continue"), (4, 0, "restore")])
def test_torch_distributed_elastic_group_made_again_over_the_survivors(nodes, victim, policy):
    """DDP over the syncd backend (init_method="syncd://"); a rank SIGKILLs itself mid-backward.
    The survivors (restore: their backward raises; continue: ranks_changed() says so at the step's
    end) destroy the default group and make it again: renumbered 0..2 in launch order, world size
    3, DDP's average over the three from then on, every torch.distributed operation right in the
    new numbering, the same parameters everywhere; syncrun exits 0."""
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    p, results = syncrun(nodes, 4, "c10d_elastic.py", "--die-rank", str(victim), "--die-at-step", "4", "--ops",
                         launcher_args=POLICIES[policy], timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    ranks = c10d_reports(results)
    left = [r for r in range(4) if r != victim]
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(i, r, 3) for i, r in enumerate(left)], out
    assert all(r["reinits"] == 1 and r["steps"] == 12 for r in ranks), ranks
    assert all(steps_averaged_right(r, policy) for r in ranks), ranks
    # new_group works too where a node lost every rank (4 x 1): its daemon stands in for the
    # addition.
    for r in ranks:
        assert all(r["ops"][op] is True for op in C10D_OPS), r
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"


@pytest.mark.parametrize("nodes,victim,also,policy", [(2, 3, -1, "restore"), (4, 0, -1, "continue"),
                                                      (4, 3, 1, "restore")], ids=["2x2", "4x1", "4x1_stand_in"])
def test_torch_distributed_elastic_group_made_again_after_a_lost_node(nodes, victim, also, policy):
    """The same job; the victim SIGKILLs its node's daemon. That node's ranks fail (their daemon is
    gone) and leave; the other nodes' ranks make the group again over themselves, and every
    operation is right there, scatter and all_to_all too: they share out among the ranks of the
    job's global set, which the daemons made afresh over the nodes left. In 4x1_stand_in rank 1
    dies first (its node's daemon stands in for it, so the set after node 3's loss holds launch
    ranks 0, 1, 2 while the group is 0 and 2)."""
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    also_args = ["--also-die-rank", str(also), "--also-die-at-step", "2"] if also >= 0 else []
    p, results = syncrun(nodes, 4, "c10d_elastic.py", "--die-rank", str(victim), "--die-at-step", "4", "--ops",
                         "--kill-daemon", *also_args, launcher_args=POLICIES[policy], timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    lost_node = victim // (4 // nodes)
    left = [r for r in range(4) if r // (4 // nodes) != lost_node and r != also]
    ranks = c10d_reports(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == \
        [(i, r, len(left)) for i, r in enumerate(left)], out
    assert all(r["reinits"] == (1 if also < 0 else 2) and steps_averaged_right(r, "restore") for r in ranks), ranks
    for r in ranks:
        assert r["ops"] == {op: True for op in C10D_OPS}, r
        assert r["set_ranks"] == [q for q in range(4) if q // (4 // nodes) != lost_node], r
    assert len({r["digest"] for r in ranks}) == 1, "the survivors' parameters differ"


@pytest.mark.parametrize("nodes,policy", [(2, "restore"), (4, "continue")])
def test_torch_distributed_group_takes_a_replacement_under_respawn(nodes, policy):
    """syncrun --elastic --respawn: rank 1 killed mid-backward; the survivors make the group again
    over three, then the replacement's init_process_group("syncd", init_method="syncd://") meets
    their next ranks_changed(): all four make it again at world size 4, the replacement gets rank
    0's parameters (DDP's broadcast) and step; all end with the same parameters and the right
    average in every step since."""
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    launcher = ["--elastic", "--respawn"] + (["--on-loss", "continue"] if policy == "continue" else [])
    # Past 30 steps the others go on until the replacement has joined (it starts slowly under ASan).
    p, results = syncrun(nodes, 4, "c10d_elastic.py", "--die-rank", "1", "--die-at-step", "4", "--steps", "30",
                         "--sleep-ms", "50", "--wait-for-size", "4", "--ops", launcher_args=launcher, timeout=180)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    ranks = c10d_reports(results)
    assert [(r["rank"], r["launch_rank"], r["size"]) for r in ranks] == [(r, r, 4) for r in range(4)], out
    assert [r["replacement"] for r in ranks] == [False, True, False, False], (ranks, out[-4000:])
    assert [r["reinits"] for r in ranks] == [2, 0, 2, 2], (ranks, out[-4000:])
    assert all(steps_averaged_right(r, policy) and r["steps"] >= 30 for r in ranks), ranks
    assert len({r["steps"] for r in ranks}) == 1, ranks
    assert all(r["ops"] == {op: True for op in C10D_OPS} for r in ranks), ranks
    assert len({r["digest"] for r in ranks}) == 1, "the replacement's parameters differ from the others'"


def test_torch_distributed_syncd_rendezvous_refuses_a_rank_it_would_not_give(tmp_path):
    pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
    script = tmp_path / "wrong_rank.py"
    script.write_text("import torch.distributed as dist, syncd.torch.distributed\n"
                      "from report import report\n"
                      "import os\n"
                      "asked = 1 - int(os.environ['SYNCD_RANK'])  # rank 0 asks for 1; rank 1 leaves it out\n"
                      "try:\n"
                      "    dist.init_process_group('syncd', init_method='syncd://',\n"
                      "                            **({'rank': 1, 'world_size': 2} if asked else {}))\n"
                      "except ValueError as e:\n"
                      "    report(str(e))\n")
    p, results = syncrun(1, 2, str(script), env={"PYTHONPATH": os.pathsep.join([os.path.join(BUILD, "python"), JOBS])},
                         timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    # Both ranks raise (rank 1 asked for nothing wrong), naming rank 0's request.
    assert len(results) == 2 and all("syncd:// rendezvous: rank=1 was asked for, but the job's live ranks [0, 1] "
                                     "make launch rank 0 rank 0 of 2" in r for r in results), results


# Horovod's even/odd process-set pattern (every rank's DistributedOptimizer restricted to the
# even set): the odd ranks' step() used to raise in backward, and under --coord topo the even
# ranks waited for a TOPO plan the odd ranks never registered. The script stops itself after 60 s.
@pytest.mark.parametrize("nodes", [1, 2], ids=["1x4", "2x2"])
@pytest.mark.parametrize("mode", ["negotiate", "topo"])
def test_an_optimizer_restricted_to_a_process_set_lets_the_other_ranks_train_alone(mode, nodes):
    p, results = syncrun(nodes, 4, "set_optimizer.py", syncd_args=["--coord=%s" % mode], timeout=120)
    assert p.returncode == 0 and len(results) == 4, p.stdout + p.stderr
    for info in map(json.loads, results):
        assert info["in_even"] == (info["rank"] % 2 == 0)
        # Even ranks: SGD on the set's averaged gradients; odd ranks: on their own.
        assert info["error"] < 1e-5, info
        for what, got in info["refused"].items():
            assert isinstance(got, dict), (info["rank"], what, got)
            assert got["seconds"] < 1.0, (info["rank"], what, got)
            assert "rank %d is not in" % info["rank"] in got["message"], got
            assert "ranks=%s" % info["outside"] in got["message"], got


def test_ranks_that_exit_without_shutdown_leave_and_the_others_go_on():
    """Node 1's ranks end without hvd.shutdown(), their client held past the interpreter's end;
    node 0's ranks then allreduce over a process set of their own: it completes, and the daemons
    log no rank that died and no aborted job."""
    p, results = syncrun(2, 4, "exit_without_shutdown.py", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert results == ["sum 3", "sum 3"], p.stdout + p.stderr
    assert "exited without detaching" not in p.stderr and "aborted" not in p.stderr, p.stderr
