#!/usr/bin/env bash
# Benchmark: `git-xet hash` against the reference client's `hf_xet.hash_files` on one large file.
#
# Usage: bench/hash.sh [FILE]
#
#   FILE                 the file to hash (default: $GIT_XET_BENCH_FILE, else
#                        ${TMPDIR:-/tmp}/git-xet-bench-1g.bin). Created as 1 GiB of random bytes
#                        if missing; reused as is if present.
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` installed (default: .venv/bin/python in the crate
#                        root, then /tmp/hfvenv/bin/python).
#   BENCH_RUNS           runs per tool (default 3); the best run of each counts.
#
# Steps: build the release binary, make sure FILE exists, read it once so it sits in the page
# cache, then time the two tools alternately (ours as a whole process, the reference as the
# `hash_files` call inside one Python process), check that both print the same Xet hash, and
# print both throughputs (GB = 10^9 bytes) and the ratio ours/reference.
#
# This is a measurement, not a test: numbers depend on the machine and on whatever else runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file="${1:-${GIT_XET_BENCH_FILE:-${TMPDIR:-/tmp}/git-xet-bench-1g.bin}}"
runs="${BENCH_RUNS:-3}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_hf_python

build_release

if [[ ! -f "$file" ]]; then
    echo "bench: creating $file (1 GiB of random bytes)" >&2
    head -c 1073741824 /dev/urandom > "$file.tmp"
    mv "$file.tmp" "$file"
fi
echo "bench: reading $file into the page cache" >&2
cat "$file" > /dev/null

"$python" - "$bin" "$file" "$runs" <<'PY'
import os, subprocess, sys, time
import hf_xet

bin_path, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
size = os.path.getsize(path)
ours, ref = [], []
our_hash = ref_hash = None
for _ in range(runs):
    t = time.perf_counter()
    out = subprocess.run([bin_path, "hash", path], check=True, capture_output=True, text=True).stdout
    ours.append(time.perf_counter() - t)
    our_hash = out.split()[0]
    t = time.perf_counter()
    info = hf_xet.hash_files([path])[0]
    ref.append(time.perf_counter() - t)
    ref_hash = info.hash

best_ours, best_ref = min(ours), min(ref)
gbps = lambda s: size / s / 1e9
print(f"file:       {path} ({size} bytes)")
print(f"git-xet:    {gbps(best_ours):.2f} GB/s  (best of {runs}: {best_ours:.3f} s; all: "
      + ", ".join(f"{s:.3f}" for s in ours) + ")")
print(f"hf_xet:     {gbps(best_ref):.2f} GB/s  (best of {runs}: {best_ref:.3f} s; all: "
      + ", ".join(f"{s:.3f}" for s in ref) + ")")
print(f"ratio:      {best_ref / best_ours:.2f}  (git-xet / hf_xet throughput)")
if our_hash != ref_hash:
    print(f"MISMATCH:   git-xet {our_hash} != hf_xet {ref_hash}")
    sys.exit(1)
print(f"hashes agree: {our_hash}")
PY
