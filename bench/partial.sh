#!/usr/bin/env bash
# Eager-SGD's partial-collective micro-benchmark (Li et al., PPoPP 2020) on this machine: full
# allreduce, solo and majority partial allreduce through syncd (`syncd-bench partial`), and
# OpenMPI's MPI_Allreduce under the same linear skew (rank r waits r x skew ms before each call).
# Prints a table and one JSON line with the ratios the goals are stated in.
#   bench/partial.sh [--nodes 4] [--ranks 16] [--rounds 40] [--skew-ms 1] [--size 64K] [--build build]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nodes=4 ranks=16 rounds=40 skew=1 size=64K build="$here/../build"
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --skew-ms) skew=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "partial.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bytes=$(/usr/bin/python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20}.get(s[-1],1); print(int(float(s.rstrip('KM'))*m))" "$size")
syncd=$("$build/bin/syncrun" -N "$nodes" -n "$ranks" --syncd-arg=--log-level=warn -- \
  "$build/bin/syncd-bench" partial --rounds "$rounds" --skew-ms "$skew" --size "$size" --json 2>/dev/null | grep '^{')
mpi='{}'
if [ -x "$build/bin/syncd-mpi-partial" ] && command -v mpirun >/dev/null; then
  # Shared memory between the ranks of one machine (--mca btl self,vader), oversubscribed cores.
  mpi=$(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -np "$ranks" \
    "$build/bin/syncd-mpi-partial" "$rounds" 3 "$skew" "$bytes" 2>/dev/null | grep '^{' || echo '{}')
fi
/usr/bin/python3 - "$syncd" "$mpi" <<'PY'
import json, sys
s, mpi = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rows = dict(s["modes"])
if mpi:
    rows["mpi"] = {"mean_us": mpi["mean_us"], "max_us": mpi["max_us"], "mean_nap": mpi["mean_nap"], "fresh_pct": 100.0}
full = rows["full"]["mean_us"]
print(f"# partial: {s['ranks']} ranks on {s['nodes']} nodes, rank r waits r x {s['skew_ms']:g} ms, "
      f"{s['bytes']} bytes, {s['rounds']} rounds")
print(f"# {'mode':<22} {'mean us':>10} {'max us':>10} {'mean NAP':>9} {'vs full':>8} {'vs MPI':>8}")
for name, r in rows.items():
    label = {"full": "syncd full allreduce", "solo": "syncd solo", "majority": "syncd majority",
             "mpi": "MPI_Allreduce (OpenMPI)"}[name]
    vs_mpi = f"{mpi['mean_us'] / r['mean_us']:>7.1f}x" if mpi else f"{'-':>8}"
    print(f"  {label:<22} {r['mean_us']:>10.1f} {r['max_us']:>10.1f} {r['mean_nap']:>9.2f} "
          f"{full / r['mean_us']:>7.1f}x {vs_mpi}")
goals = {"solo_vs_full": round(full / rows["solo"]["mean_us"], 1),
         "majority_vs_full": round(full / rows["majority"]["mean_us"], 1)}
if mpi:
    goals["solo_vs_mpi"] = round(mpi["mean_us"] / rows["solo"]["mean_us"], 1)
    goals["majority_vs_mpi"] = round(mpi["mean_us"] / rows["majority"]["mean_us"], 1)
print(f"# goals: solo >= 30x lower mean latency than full ({goals['solo_vs_full']}x), majority >= 2x "
      f"({goals['majority_vs_full']}x); solo NAP {rows['solo']['mean_nap']:.2f} (close to 1), majority NAP "
      f"{rows['majority']['mean_nap']:.2f} (close to {s['ranks'] / 2:g})")
print(json.dumps({"bench": "partial", "ranks": s["ranks"], "nodes": s["nodes"], "skew_ms": s["skew_ms"],
                  "bytes": s["bytes"], "modes": rows, "ratios": goals}))
PY
