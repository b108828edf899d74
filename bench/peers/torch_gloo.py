#!/usr/bin/python3
"""The peer a user would pick instead of syncd on CPUs: torch.distributed with gloo.

Runs the same measurement as `syncd-bench allreduce` (nccl-tests' time_us and busbw, OSU's p50
with a barrier outside the timed region) and prints the same JSON keys, one object per size.

    /usr/bin/python3 bench/peers/torch_gloo.py --ranks 4 --sizes 8,1K,64M [--json]
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


def worker(rank, args, port):
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
        count = max(1, nbytes // esize)
        nbytes = count * esize
        buf = torch.zeros(count, dtype=dtype)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        t_est = mean_across_ranks(time.perf_counter() - t0)
        iters = int(min(args.iters, max(5, args.seconds / 2 / max(t_est, 1e-7))))
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        mean_s = (time.perf_counter() - t0) / iters
        lat = []
        for _ in range(iters):
            dist.barrier()
            s = time.perf_counter()
            dist.all_reduce(buf)
            lat.append(time.perf_counter() - s)
        time_us = mean_across_ranks(mean_s) * 1e6
        p50_us = mean_across_ranks(statistics.median(lat)) * 1e6
        algbw = nbytes / (time_us * 1e-6) / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if rank == 0:
            if args.json:
                print(json.dumps({"op": "allreduce", "peer": "torch_gloo", "bytes": nbytes, "ranks": n,
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
    p.add_argument("--json", action="store_true")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (default: a free one)")
    args = p.parse_args()
    port = args.port
    if port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    if not args.json:
        print(f"# torch.distributed gloo allreduce: {args.ranks} ranks, dtype {args.dtype}")
        print(f"# {'size(B)':>12} {'count':>12} {'type':>9} {'time(us)':>12} {'algbw(GB/s)':>10} "
              f"{'busbw(GB/s)':>10} {'p50(us)':>12}")
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
