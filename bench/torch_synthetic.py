#!/usr/bin/python3
"""Synthetic data-parallel training: syncd.torch and DDP over syncd against DDP over gloo.

torchvision models with random weights train on random batches (CPU, one thread per rank), as
Horovod's pytorch_synthetic_benchmark does. The same number of ranks runs each model three times
in this one invocation: through syncd.torch (syncrun, DistributedOptimizer), through
torch.nn.parallel.DistributedDataParallel over the syncd backend (syncrun,
dist.init_process_group("syncd")), and through DDP over gloo. Throughput is images/s over all
ranks, from the slowest rank's time for the timed steps; ratios > 1 mean the first is faster.

    /usr/bin/python3 bench/torch_synthetic.py [--models resnet18,resnet50] [--ranks 4] [--json]
        [--batch-size 8] [--image-size 112] [--steps 6] [--warmup 2] [--nodes 1]
        [--syncd-arg=--coord=topo ...]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_step(args, model):
    import torch
    import torch.nn.functional as F
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))

    def step(optimizer):
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()
    return step


def timed(args, step, optimizer, barrier, mark=None):
    for _ in range(args.warmup):
        step(optimizer)
    barrier()
    if mark:
        mark()
    start = time.perf_counter()
    for _ in range(args.steps):
        step(optimizer)
    return time.perf_counter() - start


def syncd_worker(args):
    import torch
    import torchvision
    import syncd.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    elapsed = timed(args, make_step(args, model), optimizer, hvd.barrier)
    slowest = hvd.allreduce(torch.tensor([elapsed], dtype=torch.float64), op=hvd.Max, name="elapsed").item()
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({"seconds": slowest, "ranks": hvd.size()}), flush=True)
    hvd.shutdown()


def no_comm_hook(state, bucket):
    """A DDP communication hook that communicates nothing: the bucket comes back as it is."""
    import torch
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def ddp_train(args, backend, staging=None, no_comm=False, **init):
    """DDP training over `backend`; returns the slowest rank's seconds for the timed steps.
    `staging` (syncd): filled with what copying DDP's buckets through the arena cost this rank
    over the timed steps (ProcessGroupSyncd.staging_stats())."""
    import torch
    import torch.distributed as dist
    import torchvision
    torch.set_num_threads(1)
    dist.init_process_group(backend, **init)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(getattr(torchvision.models, args.model)())
    if no_comm:
        model.register_comm_hook(None, no_comm_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    pg = dist.distributed_c10d._get_default_group()
    before = {}
    mark = (lambda: before.update(pg.staging_stats())) if staging is not None else None
    elapsed = timed(args, make_step(args, model), optimizer, dist.barrier, mark)
    if staging is not None:
        after = pg.staging_stats()
        staging.update({k: after[k] - before[k] for k in after})
        staging["step_seconds"] = elapsed / args.steps
    t = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    return t.item()


def ddp_syncd_worker(args):
    import syncd.torch.distributed  # noqa: F401  registers the backend
    staging = {}
    seconds = ddp_train(args, "syncd", staging, no_comm=args.worker == "ddp_no_comm")
    if int(os.environ["RANK"]) == 0:
        print("RESULT " + json.dumps({"seconds": seconds, "ranks": int(os.environ["WORLD_SIZE"]), "staging": staging}),
              flush=True)


def ddp_worker(rank, args, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    seconds = ddp_train(args, "gloo", rank=rank, world_size=args.ranks)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "ranks": args.ranks}, f)


def worker_args(args, model):
    return ["--model", model, "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
            "--steps", str(args.steps), "--warmup", str(args.warmup)]


def run_syncd(args, model, worker="syncd"):
    build = args.build
    cmd = [os.path.join(build, "bin", "syncrun"), "-N", str(args.nodes), "-n", str(args.ranks),
           "--syncd-arg=--log-level=warn"] + ["--syncd-arg=" + a for a in args.syncd_arg]
    cmd += ["--", sys.executable, os.path.abspath(__file__), "--worker", worker] + worker_args(args, model)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        sys.exit("syncd run of %s failed:\n%s%s" % (model, p.stdout, p.stderr))
    return json.loads(lines[0][len("RESULT "):])


def run_ddp(args, model):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ddp.json")
        wargs = argparse.Namespace(**vars(args))
        wargs.model = model
        mp.spawn(ddp_worker, args=(wargs, port, out), nprocs=args.ranks, join=True)
        with open(out) as f:
            return json.load(f)["seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18,resnet50")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--nodes", type=int, default=1, help="syncd daemons (simulated nodes) for the syncd run")
    p.add_argument("--batch-size", type=int, default=8, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=112)
    p.add_argument("--steps", type=int, default=6, help="timed steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--syncd-arg", action="append", default=[], help="extra syncd flag, e.g. --coord=topo")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-comm", action="store_true",
                   help="also run DDP with a hook that communicates nothing (what DDP itself costs here)")
    p.add_argument("--worker", choices=["syncd", "ddp_syncd", "ddp_no_comm"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "syncd":
        return syncd_worker(args)
    if args.worker in ("ddp_syncd", "ddp_no_comm"):
        return ddp_syncd_worker(args)
    # Static core partitioning gives the daemon a core of its own: on a node with dozens of cores
    # that costs a few percent of compute, on a small machine it halves what the ranks get. There
    # the daemon shares the cores (as DDP's gloo threads do) unless told otherwise.
    if (os.cpu_count() or 1) < 8 and not any(a.startswith("--cores") for a in args.syncd_arg):
        args.syncd_arg.append("--cores=none")

    images = args.batch_size * args.ranks * args.steps
    print("# syncd.torch vs DistributedDataParallel (gloo): %d ranks, batch %d per rank, %dx%d images, %d timed "
          "steps after %d warm-up; syncd on %d daemon(s)%s" %
          (args.ranks, args.batch_size, args.image_size, args.image_size, args.steps, args.warmup, args.nodes,
           (" with " + " ".join(args.syncd_arg)) if args.syncd_arg else ""), flush=True)
    print("# %-10s %14s %16s %14s | %10s %16s %18s" % ("model", "syncd.torch", "DDP over syncd", "DDP over gloo",
                                                      "syncd/gloo", "DDP syncd/gloo", "DDP syncd/syncd.torch"),
          flush=True)
    print("# %-10s %14s %16s %14s |" % ("", "img/s", "img/s", "img/s"), flush=True)
    results = []
    for model in args.models.split(","):
        syncd_s = run_syncd(args, model)["seconds"]
        ddp_syncd = run_syncd(args, model, "ddp_syncd")
        ddp_syncd_s, staging = ddp_syncd["seconds"], ddp_syncd["staging"]
        ddp_s = run_ddp(args, model)
        row = {"bench": "torch_synthetic", "model": model, "ranks": args.ranks, "nodes": args.nodes,
               "batch_size": args.batch_size, "image_size": args.image_size, "steps": args.steps,
               "syncd_img_s": round(images / syncd_s, 2), "ddp_syncd_img_s": round(images / ddp_syncd_s, 2),
               "ddp_gloo_img_s": round(images / ddp_s, 2), "ratio": round(ddp_s / syncd_s, 3),
               "ddp_syncd_vs_gloo": round(ddp_s / ddp_syncd_s, 3),
               "ddp_syncd_vs_syncd_torch": round(syncd_s / ddp_syncd_s, 3), "syncd_args": args.syncd_arg,
               # Rank 0's copies of DDP's buckets into the arena and back, per timed step.
               "ddp_staging_mb_in": round(staging["bytes_in"] / args.steps / 1e6, 2),
               "ddp_staging_mb_out": round(staging["bytes_out"] / args.steps / 1e6, 2),
               "ddp_staging_ms": round((staging["seconds_in"] + staging["seconds_out"]) / args.steps * 1e3, 2),
               "ddp_staging_share": round((staging["seconds_in"] + staging["seconds_out"]) / args.steps /
                                          staging["step_seconds"], 4)}
        if args.no_comm:
            # The same DDP job with no communication at all: the most any backend can give DDP here.
            row["ddp_no_comm_img_s"] = round(images / run_syncd(args, model, "ddp_no_comm")["seconds"], 2)
        results.append(row)
        print("  %-10s %14.2f %16.2f %14.2f | %9.3fx %15.3fx %17.3fx" %
              (model, row["syncd_img_s"], row["ddp_syncd_img_s"], row["ddp_gloo_img_s"], row["ratio"],
               row["ddp_syncd_vs_gloo"], row["ddp_syncd_vs_syncd_torch"]), flush=True)
    print("# DDP over syncd, rank 0's copies of its buckets through the arena per step (staging_stats()):")
    for row in results:
        print("  %-10s %7.2f MB in %7.2f MB out %8.2f ms = %5.2f %% of the step" %
              (row["model"], row["ddp_staging_mb_in"], row["ddp_staging_mb_out"], row["ddp_staging_ms"],
               100 * row["ddp_staging_share"]), flush=True)
    if args.no_comm:
        print("# DDP with a communication hook that communicates nothing (same job, same cores):")
        for row in results:
            print("  %-10s %7.2f img/s; DDP over syncd reaches %.3f of it, syncd.torch %.3f" %
                  (row["model"], row["ddp_no_comm_img_s"], row["ddp_syncd_img_s"] / row["ddp_no_comm_img_s"],
                   row["syncd_img_s"] / row["ddp_no_comm_img_s"]), flush=True)
    if args.json:
        for row in results:
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
