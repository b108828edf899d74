#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<harness>/: well-formed inputs of every kind
each harness parses (what a correct client, daemon or syncctl sends), from which libFuzzer
mutates. Deterministic; run it again after a wire format changes. Crashes a fuzzer finds are
added by hand next to these (name them crash-<what>) and replay in every build."""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MAGIC, VERSION = 0x53594e43, None  # version read from the ABI header below
WIRE = None  # the daemon protocol (daemon/base/version.h's kWireVersion), read in main()


def abi_version():
    here = os.path.dirname(os.path.abspath(__file__))
    for line in open(os.path.join(here, "..", "..", "proto", "shm_abi.h")):
        if "kMagic" in line and "=" in line and "uint32_t" in line:
            magic = int(line.split("=")[1].split(";")[0].strip(), 0)
        if "kVersion" in line and "=" in line and "uint32_t" in line:
            version = int(line.split("=")[1].split(";")[0].strip(), 0)
    return magic, version


def wire_version():
    here = os.path.dirname(os.path.abspath(__file__))
    for line in open(os.path.join(here, "..", "..", "daemon", "base", "version.h")):
        if "kWireVersion" in line and "=" in line:
            return int(line.split("=")[1].split(";")[0].strip(), 0)
    raise SystemExit("kWireVersion not found in daemon/base/version.h")


def write(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def attach_request(rank, size, local_rank, local_size, job=0):
    return struct.pack("<IIiiiiiIQ", MAGIC, VERSION, rank, size, local_rank, local_size, 4321, 0, job)


def submit_entry(kind, name, dtype=6, op=0, root=0, shape=(4,), offset=0, flags=0, handle=1, tag=0, compression=0):
    sizes = {0: 1, 1: 1, 2: 4, 3: 8, 4: 2, 5: 2, 6: 4, 7: 8}
    count = 1
    for d in shape:
        count *= d
    nbytes = 0 if kind == 3 else count * sizes[dtype]
    dims = list(shape) + [0] * (8 - len(shape))
    entry = struct.pack("<QIIIiddQQII", handle, kind, dtype, op, root, 1.0, 1.0, offset, nbytes, len(shape), flags)
    entry += struct.pack("<8q", *dims)
    entry += struct.pack("<QQiIq", 0, 0, 0, 0, tag)  # aux range, process set, partial mode, tag
    entry += struct.pack("<II", compression, 0)
    entry += name.encode().ljust(360 - len(entry), b"\0")  # abi::SubmitEntry
    assert len(entry) == 360
    return entry


def graph_version():
    here = os.path.dirname(os.path.abspath(__file__))
    for line in open(os.path.join(here, "..", "..", "proto", "graph_wire.h")):
        if "kGraphVersion" in line and "=" in line:
            return int(line.split("=")[1].split(";")[0].strip(), 0)
    raise SystemExit("kGraphVersion not found in proto/graph_wire.h")


def graph():
    # (collective, dtype, op, memory: 0 host 1 GPU, compression, compression ppm, count, name, tensor);
    # proto/graph_wire.h
    ops = [(0, 6, 0, 0, 0, 0, 0, "forward", ""), (0, 6, 0, 0, 0, 0, 0, "backward", ""),
           (1, 6, 1, 0, 4, 10000, 1000, "allreduce.w", "grad.w"), (1, 6, 1, 1, 0, 0, 10, "allreduce.b", "grad.b"),
           (0, 6, 0, 0, 0, 0, 0, "step", "")]
    edges = [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4)]
    out = struct.pack("<6I", 0x47504F54, graph_version(), len(ops), len(edges), 1, 0)
    for coll, dt, op, memory, compression, ppm, count, name, tensor in ops:
        out += struct.pack("<BBBBBIQHH", coll, dt, op, memory, compression, ppm, count, len(name), len(tensor)) + \
            name.encode() + tensor.encode()
    for p, c in edges:
        out += struct.pack("<II", p, c)
    return out + struct.pack("<I", 4)


def meta(kind=1, dtype=6, op=1, gpu=0, root=0, shape=(4, 4), compression=1, compression_ppm=0, absent=0):
    # ... then each rank's rows and splits (none: this kind's shapes agree).
    return struct.pack("<IIIIiddIII", kind, dtype, op, gpu, root, 1.0, 1.0, compression, compression_ppm, absent) + \
        struct.pack("<I", len(shape)) + \
        b"".join(struct.pack("<q", d) for d in shape) + struct.pack("<II", 0, 0)


def string(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(b)) + b


def control(kind, job, cycle=0, code=0, text=""):
    out = kind.encode() + struct.pack("<QQiB", job, cycle, code, WIRE) + text.encode()
    return out.ljust(384, b"\0")


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def pb_field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, float):
        return varint(num << 3 | 1) + struct.pack("<d", value)
    b = value.encode() if isinstance(value, str) else value
    return varint(num << 3 | 2) + varint(len(b)) + b


def main():
    global MAGIC, VERSION, WIRE
    MAGIC, VERSION = abi_version()
    WIRE = wire_version()
    # attach_handshake: 3 bytes choose the node (nodes, node rank, local size), then the request.
    write("attach_handshake", "one-node", bytes([0, 0, 2]) + attach_request(1, 2, 1, 2))
    write("attach_handshake", "node1-of-2", bytes([1, 1, 2]) + attach_request(3, 4, 1, 2, job=77))
    write("attach_handshake", "first-client", bytes([0, 0, 0]) + attach_request(0, 4, 0, 4))
    write("attach_handshake", "draining", bytes([0x80, 0, 1]) + attach_request(0, 1, 0, 1))
    # ... a node service's: uid 1000 (its job 77), uid 1001 gid 51 (job 78 wants gid 50), another job.
    write("attach_handshake", "service-own-job", bytes([0x40, 0, 2]) + attach_request(1, 2, 1, 2, job=77))
    write("attach_handshake", "service-other-group", bytes([0x40, 0x10, 0x12]) + attach_request(0, 2, 0, 2, job=78))
    write("attach_handshake", "service-unregistered", bytes([0x40, 0, 2]) + attach_request(0, 2, 0, 2, job=79))
    # submission: the entry, then the arena's first bytes.
    write("submission", "allreduce", submit_entry(1, "grad.w", dtype=6, op=1, shape=(2, 2)) + b"\0" * 16)
    write("submission", "allreduce-fp16",
          submit_entry(1, "grad.c", dtype=6, op=1, shape=(4,), compression=2) + b"\0" * 16)
    write("submission", "broadcast", submit_entry(2, "params", dtype=3, root=2, shape=(3,)) + b"\0" * 24)
    write("submission", "barrier", submit_entry(3, "barrier.1", shape=()))
    write("submission", "empty-tensor", submit_entry(1, "empty", dtype=4, shape=(0, 5)))
    g = graph()
    entry = submit_entry(4, "syncd.topo_plan", shape=())
    entry = entry[:40] + struct.pack("<QQ", 0, len(g)) + entry[56:]
    write("submission", "register-graph", entry + g)
    why = b"its tensor is a torch.BoolTensor"
    fail = submit_entry(5, "refused", shape=())
    fail = fail[:40] + struct.pack("<QQ", 0, len(why)) + fail[56:]
    write("submission", "fail-notice", fail + why)
    write("submission", "send", submit_entry(14, "c10d.0.p2p.0", dtype=6, root=1, shape=(4,), tag=3) + b"\0" * 16)
    write("submission", "recv-any-source", submit_entry(15, "c10d.0.p2p.1", dtype=6, root=-1, shape=(4,), tag=3) + b"\0" * 16)
    write("submission", "gpu-descriptor", submit_entry(1, "gpu.grad", flags=1, shape=(8,)) + b"\1" * 128)
    # graph: the wire format alone.
    write("graph", "five-ops", g)
    # coord_wire: first byte 0 requests, 1 responses, 2 control.
    req = struct.pack("<II", WIRE, 2) + string("grad.w") + meta() + string("") + struct.pack("<Q", 0) + string("grad.b") + \
        meta(shape=(4,)) + string("rank 1 disagreed") + struct.pack("<Q", 5 * 10**9)
    write("coord_wire", "requests", b"\0" + req)
    resp = struct.pack("<II", WIRE, 2) + string("grad.w") + struct.pack("<i", 0) + string("") + struct.pack("<i", 3) + meta() + \
        string("grad.b") + struct.pack("<i", 3) + string("mismatched shape") + struct.pack("<i", -1) + meta(shape=(4,))
    write("coord_wire", "responses", b"\1" + resp)
    write("coord_wire", "abort", b"\2" + control("A", 0x1234, code=13, text="the job was shut down after a stall"))
    write("coord_wire", "cycle", b"\2" + control("C", 0x1234, cycle=42))
    write("coord_wire", "hello", b"\2" + control("H", 0x1234))
    write("coord_wire", "hello-with-plan", b"\2" + control("H", 0x1234, text="plan 00c0ffee00c0ffee"))
    # A TOPO plan (plan/plan_codec.h): two float32 sums in one group, a third alone.
    plan = struct.pack("<4I", 0x4E4C5054, 1, 3, 2)
    for name, count in (("grad.w", 1000), ("grad.b", 10), ("grad.fc", 50)):
        plan += struct.pack("<4BIQH", 6, 1, 0, 0, 0, count, len(name)) + name.encode()
    plan += struct.pack("<2I", 0, 2)
    write("coord_wire", "topo-plan", b"\3" + plan)
    # A health bundle going up, inline (cycle 0): node 1's report and node 2's, each "@node age_ms",
    # the header, then a row per rank.
    write("coord_wire", "health", b"\2" + control("N", 0x1234, cycle=0, text="@1 20\nnode-b 4242 1 10 50100 50900 200\n"
                                                  "2 5002 1 120 S - 10 0 0 0 0\n3 5003 1 2500 T S 10 10 50000 51000 1000000\n"
                                                  "@2 310\nnode-c 4243 0 10 100 200 0\n4 5004 1 80 R - 10 0 0 0 0\n"))
    # rendezvous_join: a JoinRequest of job 7 (4 nodes of 2 ranks); an input of even length has
    # the harness sign it with the job's token ("fuzz-token"), an odd one is checked as it comes.
    join = pb_field(2, 2) + pb_field(3, 4) + pb_field(4, 2) + pb_field(5, b"\x01" * 40) + \
        pb_field(6, "node-a") + pb_field(7, 999) + pb_field(8, 1) + pb_field(10, "GPU-0000") + pb_field(11, WIRE) + \
        pb_field(12, "0.1.0") + pb_field(13, 7)
    write("rendezvous_join", "node1", join)
    write("rendezvous_join", "older-protocol", pb_field(2, 2) + pb_field(3, 4) + pb_field(11, WIRE - 1))
    write("rendezvous_join", "another-job", join[:-len(pb_field(13, 7))] + pb_field(13, 8))
    write("rendezvous_join", "forged-proof", join + pb_field(14, 1796600000000) + pb_field(15, b"\x00" * 32))
    # control_request: a DrainRequest's timeout.
    write("control_request", "drain-30s", pb_field(1, 30.0))
    write("control_request", "drain-default", pb_field(1, -1.0))
    write("control_request", "empty", b"")
    # ... and an AddJobRequest's registration (job, uid, gid, weight).
    write("control_request", "add-job", pb_field(1, pb_field(1, 4711) + pb_field(2, 1000) + pb_field(4, 2)))
    write("control_request", "add-job-gid",
          pb_field(1, pb_field(1, 4712) + pb_field(2, 1000) + pb_field(3, 100) + pb_field(4, 1)))


if __name__ == "__main__":
    main()
