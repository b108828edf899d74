#!/usr/bin/python3
"""The peer a user would pick instead of syncd on CPUs: torch.distributed with gloo.

Runs the same measurement as `syncd-bench <op>` (nccl-tests' time_us, sizes and busbw, OSU's p50
with a barrier outside the timed region) and prints the same JSON keys, one object per size.
allgather is dist.all_gather into a list, alltoall dist.all_to_all_single; gloo has no
reduce_scatter (torch 1.13), so a gloo user's reducescatter is an all_reduce and a copy of the
rank's part, which is what is timed. broadcast, reduce, gather and scatter are dist.broadcast,
dist.reduce, dist.gather and dist.scatter, to and from rank 0.

    /usr/bin/python3 bench/peers/torch_gloo.py --ranks 4 --sizes 8,1K,64M [--op allgather] [--json]

With --from-env the script is one rank of a job launched by someone else (bench/peers/on_links.sh
puts each rank in its simulated node's network namespace): RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT come from the environment, as torchrun sets them.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
          "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}


def parse_size(text):
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    num = text.rstrip("BKMG")
    return int(float(num) * units[text[len(num):][:1]])


def mean_across_ranks(value):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def make_collective(op, buf, n):
    if op == "allreduce":
        return lambda: dist.all_reduce(buf)
    if op == "allgather":
        outs = [torch.empty_like(buf) for _ in range(n)]
        return lambda: dist.all_gather(outs, buf)
    if op == "alltoall":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf)
    rank = dist.get_rank()
    if op == "reduce":
        return lambda: dist.reduce(buf, dst=0)
    if op == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    if op == "gather":
        outs = [torch.empty_like(buf) for _ in range(n)] if rank == 0 else None
        return lambda: dist.gather(buf, outs, dst=0)
    if op == "scatter":
        out = torch.empty(buf.numel() // n, dtype=buf.dtype)
        pieces = list(buf.chunk(n)) if rank == 0 else None
        return lambda: dist.scatter(out, pieces, src=0)
    part = torch.empty(buf.numel() // n, dtype=buf.dtype)

    def reducescatter():
        reduced = buf.clone()
        dist.all_reduce(reduced)
        part.copy_(reduced[rank * part.numel():(rank + 1) * part.numel()])
    return reducescatter


def worker(rank, args, port):
    if not args.from_env:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    n = args.ranks
    dtype = DTYPES[args.dtype]
    esize = torch.tensor([], dtype=dtype).element_size()
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else \
        [8 << i for i in range(24)]
    for nbytes in sizes:
        # Elements in this rank's buffer, as syncd-bench counts them.
        unit = 1 if args.op in ("allreduce", "reduce", "broadcast") else n
        count = max(unit, max(1, nbytes // esize) // unit * unit)
        gathers = args.op in ("allgather", "gather")
        if gathers:
            count //= n
        nbytes = (count * n if gathers else count) * esize
        buf = torch.zeros(count, dtype=dtype)
        collective = make_collective(args.op, buf, n)
        t0 = time.perf_counter()
        collective()
        t_est = mean_across_ranks(time.perf_counter() - t0)
        iters = int(min(args.iters, max(5, args.seconds / 2 / max(t_est, 1e-7))))
        for _ in range(args.warmup):
            collective()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            collective()
        mean_s = (time.perf_counter() - t0) / iters
        lat = []
        for _ in range(iters):
            dist.barrier()
            s = time.perf_counter()
            collective()
            lat.append(time.perf_counter() - s)
        time_us = mean_across_ranks(mean_s) * 1e6
        p50_us = mean_across_ranks(statistics.median(lat)) * 1e6
        algbw = nbytes / (time_us * 1e-6) / 1e9
        busbw = algbw if args.op in ("reduce", "broadcast") else algbw * (2 if args.op == "allreduce" else 1) * (n - 1) / n
        if rank == 0:
            if args.json:
                print(json.dumps({"op": args.op, "peer": "torch_gloo", "bytes": nbytes, "ranks": n,
                                  "dtype": args.dtype, "time_us": round(time_us, 3),
                                  "lat_p50_us": round(p50_us, 3), "algbw_GBps": round(algbw, 7),
                                  "busbw_GBps": round(busbw, 7), "iters": iters}), flush=True)
            else:
                print(f"  {nbytes:12d} {count:12d} {args.dtype:>9} {time_us:12.2f} {algbw:10.3f} "
                      f"{busbw:10.3f} {p50_us:12.2f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--sizes", default="", help="comma-separated sizes like 8,1K,64M (default 8 B .. 64 MiB)")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seconds", type=float, default=1.0, help="time budget per size")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--op", default="allreduce", choices=["allreduce", "allgather", "alltoall", "reducescatter", "broadcast", "reduce", "gather", "scatter"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (default: a free one)")
    p.add_argument("--from-env", action="store_true", help="be one rank: RANK, WORLD_SIZE, MASTER_ADDR/PORT from the environment")
    args = p.parse_args()
    if args.from_env:
        args.ranks = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ["RANK"])
        if not args.json and rank == 0:
            print(f"# torch.distributed gloo {args.op}: {args.ranks} ranks, dtype {args.dtype}")
        worker(rank, args, 0)
        return 0
    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    if not args.json:
        print(f"# torch.distributed gloo {args.op}: {args.ranks} ranks, dtype {args.dtype}")
        print(f"# {'size(B)':>12} {'count':>12} {'type':>9} {'time(us)':>12} {'algbw(GB/s)':>10} "
              f"{'busbw(GB/s)':>10} {'p50(us)':>12}")
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
