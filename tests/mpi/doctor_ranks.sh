#!/usr/bin/env bash
# `mpirun -np W tinytrain doctor`: rank 0 probes the chain and prints; every rank joins the
# all-reduce probe, which must measure MPI's all-reduce across the W ranks: one report (one
# JSON document, one "allreduce" line), the sums right, and busbw and algbw the arithmetic of
# nccl-tests' convention on the printed bytes and time. A rank other than 0 whose all-reduce
# fails says so on stderr.
# Usage: doctor_ranks.sh TINYTRAIN MPIEXEC W
set -uo pipefail
bin=$1 mpiexec=$2 W=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TINYTRAIN_CACHE_DIR=$work/cache  # the peaks rank 0 saves go to a scratch file
status=0
"$mpiexec" --oversubscribe -np "$W" "$bin" doctor --backend cpu --threads 1 --json > "$work/doctor.json" 2> "$work/err" ||
  { cat "$work/doctor.json" "$work/err"; echo "FAIL: mpirun -np $W tinytrain doctor exited non-zero"; exit 1; }
python3 - "$work/doctor.json" "$W" <<'PY' || status=1
import json, sys
path, W = sys.argv[1], int(sys.argv[2])
text = open(path).read()
try:
    doc = json.loads(text)  # one document: the other ranks print nothing
except ValueError as e:
    sys.exit(f"FAIL: stdout is not one JSON document ({e}):\n{text}")
probes = {p["name"]: p for p in doc["probes"]}
a = probes.get("allreduce")
if a is None:
    sys.exit("FAIL: no allreduce probe")
n = a["numbers"]
print(f"allreduce: {a['verdict']} {a['message']}")
print(f"(rank 0's cpu probe saw {probes['cpu']['numbers']['busy_cpus']:.2f} CPUs busy while the other ranks waited)")
checks = [
    (a["verdict"] == "ok", "verdict ok"),
    (n["transport"] == "mpi" and n["ranks"] == W, f"mpi across {W} ranks"),
    (n["sums_right"] is True, "every element the sum over the ranks"),
    (n["bytes"] == 32 << 20 and n["ms"] > 0, "32 MiB in a positive time"),
    (abs(n["algbw_gbps"] - n["bytes"] / (n["ms"] * 1e-3) / 1e9) <= 1e-9 * n["algbw_gbps"], "algbw = bytes / time"),
    (abs(n["busbw_gbps"] - n["algbw_gbps"] * 2 * (W - 1) / W) <= 1e-9 * n["busbw_gbps"], "busbw = algbw 2 (W-1) / W"),
    (doc["exit_status"] == 0, "exit status 0"),
]
bad = [what for ok, what in checks if not ok]
if bad:
    sys.exit("FAIL: " + "; ".join(bad) + "\n" + json.dumps(a, indent=1))
PY
# The lines: one report, whatever the ranks.
"$mpiexec" --oversubscribe -np "$W" "$bin" doctor --backend cpu --threads 1 > "$work/doctor.txt" 2>&1 ||
  { cat "$work/doctor.txt"; echo "FAIL: mpirun -np $W tinytrain doctor (lines) exited non-zero"; status=1; }
# (probe lines only: "<verdict> <name> <message>"; a try: line may mention peaks)
lines=$(grep -cE '^(ok|warn|FAIL|skip) +allreduce ' "$work/doctor.txt")
peaks=$(grep -cE '^(ok|warn|FAIL|skip) +peaks ' "$work/doctor.txt")
if [ "$lines" -ne 1 ] || [ "$peaks" -ne 1 ] || ! grep -q "^ok    allreduce        mpi, $W ranks: busbw" "$work/doctor.txt"; then
  cat "$work/doctor.txt"; echo "FAIL: expected one 'ok allreduce' line for $W MPI ranks and one report"; status=1
fi
# A rank other than 0 prints nothing but its all-reduce's failure, on stderr: here torchrun-style
# variables on the CPU backend, which CPU ranks refuse (they are launched with mpirun).
WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 "$bin" doctor --backend cpu --threads 1 \
  > "$work/rank1.out" 2> "$work/rank1.err"
code=$?
if [ $code -ne 1 ] || [ -s "$work/rank1.out" ] || ! grep -q "^doctor, rank 1: FAIL  allreduce .*launched with mpirun" "$work/rank1.err"; then
  cat "$work/rank1.out" "$work/rank1.err"; echo "FAIL: rank 1's failing all-reduce: exit $code, expected 1 and its FAIL line on stderr only"
  status=1
fi
[ $status -eq 0 ] && echo "PASS: doctor on $W MPI ranks measures their all-reduce, rank 0 reports"
exit $status
