#!/usr/bin/env bash
# Gradient compression on emulated links (issue 38): 2 nodes x 2 ranks, each node a network
# namespace behind a rate-limited link (syncrun --netns --link-gbit), a training step over the
# gradient set of ResNet-18 and ResNet-50 (bench/compression.py: every gradient produced by a
# trivial backward, exchanged, an SGD step), every method in the same run, alternating, --repeats
# times: syncd uncompressed; syncd with fp16 and bf16 done by the daemons; syncd's top-k (at
# --ratio, 0.01 unless told), 1-bit and PowerSGD (rank 4) with error feedback in the daemons
# (random-k is withdrawn: asked for, it is reported refused with the reason); Horovod's fp16 (cast in
# the framework process); DDP over gloo, and DDP over gloo with torch's PowerSGD hook. Reports per
# link, model and method the median step time, its speed-up over uncompressed syncd and the ranks'
# CPU time per step. Then what compression does to training (--accuracy-epochs, 0: skip): the
# quickstart's digits network (deploy/local/train_digits.py) trained on 2 nodes x 2 ranks over
# loopback, uncompressed and with each daemon method of --methods, from each of --accuracy-seeds'
# initial parameters: held-out accuracy and final training loss (a NaN loss is reported as such). The last line is one JSON object with every run. Root (network namespaces).
#   bench/compression.sh [--links 2.5,10] [--models resnet18,resnet50] [--methods ...] [--repeats 2]
#                        [--steps 5] [--warmup 3] [--accuracy-epochs 12]
#                        [--accuracy-seeds 1234,1,2] [--ratio 0.01] [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
links=2.5,10 models=resnet18,resnet50 methods=none,fp16,bf16,topk,onebit,powersgd,fp16-framework,ddp,ddp-powersgd repeats=2 steps=5 warmup=3
accuracy_epochs=12 accuracy_seeds=1234,1,2 ratio=0.01
build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --links) links=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --accuracy-epochs) accuracy_epochs=$2; shift 2 ;;
    --accuracy-seeds) accuracy_seeds=$2; shift 2 ;;
    --ratio) ratio=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "compression.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
# Withdrawn methods are refused by syncd, naming why: reported, not run.
refused=""
if [[ ,$methods, == *,randomk,* ]]; then
  refused=$(/usr/bin/python3 -c 'import syncd.torch as hvd
try:
    hvd.Compression.randomk(0.01)
except ValueError as e:
    print(e)')
  methods=$(echo ",$methods," | sed 's/,randomk,/,/; s/^,//; s/,$//')
fi
# The daemon's methods among them, uncompressed first: what the digits network trains with.
accuracy_methods=none
for m in fp16 bf16 topk onebit powersgd; do [[ ,$methods, == *,$m,* ]] && accuracy_methods+=" $m"; done
out=$(mktemp)
trap 'rm -f "$out" "$out.err" "$out.crashes" "$out.accuracy"' EXIT
run() {  # $1 link Gbit/s, $2 model, $3 method
  local gbit=$1 model=$2 method=$3 line
  local job=(/usr/bin/python3 "$here/compression.py" --method "$method" --model "$model" --steps "$steps"
             --warmup "$warmup" --label "$gbit" --ratio "$ratio")
  if [[ $method == ddp* ]]; then
    # torch 1.13's PowerSGD hook over gloo crashes now and then on these links (gloo: "enforce fail
    # at pair.cc:510 op.preamble.length <= op.nbytes", one rank aborts): the peer gets five tries,
    # and the crashes are counted in the JSON (a peer that crashed every time has no row).
    for _ in 1 2 3 4 5; do
      line=$("$build/bin/syncrun" --netns --link-gbit "$gbit" -N 2 --network-only -- \
        "$here/peers/on_links.sh" gloo 4 "${job[@]}" 2>"$out.err" | grep '^{' || true)
      [ -n "$line" ] && break
      echo "$method $model $gbit" >>"$out.crashes"
    done
  else
    line=$("$build/bin/syncrun" --netns --link-gbit "$gbit" -N 2 -n 4 --syncd-arg=--log-level=warn \
      --syncd-arg=--arena-size=1G -- "${job[@]}" 2>"$out.err" | grep '^{' || true)
  fi
  [ -z "$line" ] && [[ $method == ddp* ]] && return 0
  if [ -z "$line" ]; then
    tail -20 "$out.err" >&2
    echo "compression.sh: $method on $model at $gbit Gbit/s produced no result" >&2
    exit 1
  fi
  echo "$line" >>"$out"
}
for gbit in ${links//,/ }; do
  for model in ${models//,/ }; do
    for _ in $(seq "$repeats"); do
      for method in ${methods//,/ }; do run "$gbit" "$model" "$method"; done
    done
  done
done
touch "$out.crashes" "$out.accuracy"
for seed in $([ "$accuracy_epochs" -gt 0 ] && echo "${accuracy_seeds//,/ }"); do
  for compression in $accuracy_methods; do
    line=$("$build/bin/syncrun" -N 2 -n 4 --syncd-arg=--log-level=warn -- /usr/bin/python3 \
      "$here/../deploy/local/train_digits.py" --compression "$compression" --epochs "$accuracy_epochs" \
      --seed "$seed" --ratio "$ratio" --json --no-status --min-accuracy 0 2>"$out.err" | grep '^{' || true)
    if [ -z "$line" ]; then
      tail -20 "$out.err" >&2
      echo "compression.sh: training the digits network with $compression (seed $seed) produced no result" >&2
      exit 1
    fi
    echo "$line" >>"$out.accuracy"
  done
done
/usr/bin/python3 - "$out" "$out.crashes" "$out.accuracy" "$ratio" "$refused" <<'PY'
import json, math, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
crashes = [l.split() for l in open(sys.argv[2]) if l.strip()]
trained = [json.loads(l) for l in open(sys.argv[3])]
ratio = float(sys.argv[4])
refused = {"randomk": sys.argv[5]} if sys.argv[5] else {}
print(f"# 2 nodes x 2 ranks on emulated links; median step ms over the repeats (each a median of its steps); "
      f"top-k at ratio {ratio:g}")
print(f"{'link':>6} {'model':>9} {'method':>15} {'MiB':>6} {'step ms':>9} {'vs none':>8} {'rank CPU ms':>12}")
table = []
for key in dict.fromkeys((r["label"], r["model"]) for r in runs):
    rows = [r for r in runs if (r["label"], r["model"]) == key]
    base = statistics.median(r["step_ms"] for r in rows if r["method"] == "none") if any(
        r["method"] == "none" for r in rows) else None
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        step = statistics.median(r["step_ms"] for r in mine)
        cpu = statistics.median(r["rank_cpu_ms"] for r in mine)
        speedup = base / step if base else None
        table.append({"link_gbit": float(key[0]), "model": key[1], "method": method, "step_ms": step,
                      "speedup_vs_none": round(speedup, 3) if speedup else None, "rank_cpu_ms": cpu,
                      "runs": [r["step_ms"] for r in mine]})
        print(f"{key[0]:>6} {key[1]:>9} {method:>15} {mine[0]['gradient_bytes'] / 2**20:6.1f} {step:9.1f} "
              f"{(f'{speedup:.2f}x' if speedup else '-'):>8} {cpu:12.1f}")
if crashes:
    print(f"# peer runs that crashed and were tried again: {len(crashes)} ({', '.join(c[0] for c in crashes)})")
accuracy = [{k: t[k] for k in ("compression", "seed", "epochs", "steps", "accuracy_pct", "final_loss", "step_ms")}
            for t in trained]
if accuracy:
    seeds = list(dict.fromkeys(a["seed"] for a in accuracy))
    print(f"# the digits network, 2 nodes x 2 ranks over loopback, {accuracy[0]['epochs']} epochs; "
          f"held-out accuracy and final training loss per seed ({', '.join(map(str, seeds))}), then their mean")
    print(f"{'compression':>11} {'accuracy %':>24} {'mean':>6} {'vs none':>8} {'final loss':>24} {'mean':>7}")
    means = {c: statistics.mean(a["accuracy_pct"] for a in accuracy if a["compression"] == c)
             for c in dict.fromkeys(a["compression"] for a in accuracy)}
    for c, mean in means.items():
        mine = [a for a in accuracy if a["compression"] == c]
        acc, loss = [a["accuracy_pct"] for a in mine], [a["final_loss"] for a in mine]
        change = f"{mean - means['none']:+.2f}" if "none" in means else "-"
        print(f"{c:>11} {' '.join(f'{v:.2f}' for v in acc):>24} {mean:6.2f} {change:>8} "
              f"{' '.join(f'{v:.4f}' for v in loss):>24} {statistics.mean(loss):7.4f}")
    nans = [f"{a['compression']} (seed {a['seed']})" for a in accuracy if not math.isfinite(a["final_loss"])]
    print(f"# final losses that are not finite: {', '.join(nans) if nans else 'none'}")
    # Each method's step rows carry its accuracy change in points (the mean over the seeds).
    for row in table:
        if row["method"] in means and "none" in means:
            row["accuracy_change_pts"] = round(means[row["method"]] - means["none"], 2)
for method, why in refused.items():
    print(f"# {method}: refused: {why}")
print(json.dumps({"bench": "compression", "ratio": ratio, "results": table,
                  "peer_crashes": [" ".join(c) for c in crashes], "accuracy": accuracy, "refused": refused}))
PY
