#!/usr/bin/env bash
# Benchmark: reading without downloading. `git xet mount` of a clone whose LFS objects were
# never downloaded, against a release `git xet serve` on 127.0.0.1 (negotiated mode).
#
# Usage: bench/mount.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the safetensors checkpoint in MiB (default 4096)
#   GIT_XET_BENCH_LOGS   a directory to keep each mount's log in (with GIT_XET_LOG_LEVEL=
#                        info,git_xet::mount=trace, every FUSE read is logged)
#   GIT_XET_HF_PYTHON    a Python with `safetensors`, `numpy` and `pyarrow` (default:
#                        .venv/bin/python; install them with
#                        .venv/bin/pip install safetensors numpy pyarrow)
#
# The repository holds model.safetensors (100 float32 tensors of random values, each 1% of the
# file) and table.parquet (4 columns of 4 million random float64 each, 128 MB). It is pushed
# once through the agent; then, in a clone made with GIT_LFS_SKIP_SMUDGE=1, each step mounts
# HEAD afresh with an empty cache directory (so nothing read before is reused) and measures
# what the server sent (`sent_xorb_bytes` of its /health) for:
#   ready      from starting `git-xet mount` to the mount being listed in /proc/mounts, then
#              `ls -l` (every size shown, nothing sent);
#   head 64K   the first 64 KiB of the checkpoint;
#   1 MiB      1 MiB at a random offset;
#   tensor     safetensors.safe_open on the mount and get_tensor of one tensor (1%), and
#              its time with Python's start and imports, and without (timed in Python, as a
#              program that reads tensors sees it);
#   column     pyarrow reading one of the 4 columns of the Parquet file, and its times (the
#              same);
#   sequential `cat model.safetensors > /dev/null` (time, and the mount process's peak RSS,
#              VmHWM) against the agent's own download request of the same file in
#              `git lfs fetch` (its "done … secs=" log line), each with an empty cache;
#   fetches    the whole `git lfs fetch` of the checkpoint and of the table, against which
#              the tensor's read (goal: at most a fifth) and the column's (at most half) are
#              set.
# Prints each with its goal. This is a measurement, not a test; everything is removed
# afterwards. Needs FUSE (/dev/fuse, fusermount3).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-4096}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
python="${GIT_XET_HF_PYTHON:-$root/.venv/bin/python}"
if ! "$python" -c 'import safetensors, numpy, pyarrow' 2>/dev/null; then
    echo "bench: $python lacks safetensors, numpy or pyarrow: $python -m pip install safetensors numpy pyarrow" >&2
    exit 2
fi
if [[ ! -e /dev/fuse ]] || ! command -v fusermount3 >/dev/null; then
    echo "bench: FUSE is needed (/dev/fuse and fusermount3: apt-get install fuse3)" >&2
    exit 2
fi
use_recent_git_lfs
build_release

make_work mount-bench
mounted=""
cleanup_mount() {
    if [[ -n "$mounted" ]] && grep -q " $mounted " /proc/mounts; then
        fusermount3 -u "$mounted" 2>/dev/null || true
    fi
    bench_cleanup
}
trap cleanup_mount EXIT
avail_mib=$(df --output=avail -B1M "$work" | tail -1 | tr -d ' ')
if (( avail_mib < 5 * size_mib )); then
    echo "bench: $work has ${avail_mib} MiB free; ${size_mib} MiB needs about $(( 5 * size_mib )) MiB" >&2
    exit 2
fi

start_server s
url="$server_url"
bin_dir="$(dirname "$bin")"
use_home "$work/home"
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 GIT_XET_LOG="$work/agent.log" PATH="$bin_dir:$PATH"
git xet install --global >/dev/null
git init -q --bare "$work/remote.git"
git init -q "$work/repo"
cd "$work/repo"
git lfs track '*.safetensors' '*.parquet' >/dev/null
printf '[lfs]\n\turl = %s\n' "$url/bench/models.git/info/lfs" > .lfsconfig

echo "bench: writing a ${size_mib} MiB checkpoint and a Parquet table" >&2
"$python" - "$size_mib" <<'PY'
import json, os, struct, sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
size = int(sys.argv[1]) << 20
n = 100
per = (size // n) // 4 * 4
header = {f"layers.{i:02}.weight": {"dtype": "F32", "shape": [per // 4],
          "data_offsets": [i * per, (i + 1) * per]} for i in range(n)}
header["__metadata__"] = {"format": "pt"}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(20261125)
with open("model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    for i in range(n):
        left = per
        while left:
            k = min(left, 64 << 20)
            f.write(rng.random(k // 4, dtype=np.float32).tobytes())
            left -= k
rows = 4_000_000
pq.write_table(pa.table({c: rng.random(rows) for c in ["a", "b", "c", "d"]}), "table.parquet",
               compression="none", row_group_size=1_000_000)
PY
git add . && git commit -q -m checkpoint
git remote add origin ../remote.git
git push -q origin main
settle_server "$url"
model_size=$(stat -c %s model.safetensors)
table_size=$(stat -c %s table.parquet)
cd "$work"
rm -rf repo
GIT_LFS_SKIP_SMUDGE=1 git clone -q remote.git clone
clone="$work/clone"

sent() { curl -s "$url/health" | sed -n 's/.*"sent_xorb_bytes":\([0-9]*\).*/\1/p'; }
now() { date +%s.%N; }
step=0
# mount_fresh: mounts HEAD of the clone at a new directory with an empty cache; sets $mnt,
# $mount_pid and $ready_s.
mount_fresh() {
    step=$((step + 1))
    mnt="$work/mnt$step"
    mkdir -p "$mnt"
    local t0
    t0=$(now)
    (cd "$clone" && GIT_XET_CACHE_DIR="$work/cache$step" exec git-xet mount "$mnt" \
        2> "$work/mount$step.log") &
    mount_pid=$!
    mounted="$mnt"
    for _ in $(seq 1 3000); do
        grep -q " $mnt " /proc/mounts && break
        sleep 0.01
    done
    grep -q " $mnt " /proc/mounts || { echo "bench: the mount did not come up" >&2; cat "$work/mount$step.log" >&2; exit 1; }
    ready_s=$(echo "$(now) - $t0" | bc)
}
unmount() {
    git-xet mount --unmount "$mnt" 2>/dev/null
    wait "$mount_pid" || true
    if [[ -n "${GIT_XET_BENCH_LOGS:-}" ]]; then
        mkdir -p "$GIT_XET_BENCH_LOGS" && cp "$work/mount$step.log" "$GIT_XET_BENCH_LOGS/"
    fi
    mounted=""
    rm -rf "$work/cache$step"
}

# Ready, and every size without a download.
before=$(sent)
mount_fresh
listing=$(ls -l "$mnt")
ls_sent=$(( $(sent) - before ))
listed_size=$(stat -c %s "$mnt/model.safetensors")
[[ "$listed_size" == "$model_size" ]] || { echo "bench: ls shows $listed_size, not $model_size" >&2; exit 1; }
# The first 64 KiB.
before=$(sent)
head -c 65536 "$mnt/model.safetensors" > /dev/null
head_sent=$(( $(sent) - before ))
unmount

# 1 MiB at a random offset.
mount_fresh
offset=$(( (RANDOM * 32768 + RANDOM) % (model_size - (1 << 20)) ))
before=$(sent)
"$python" -c "
import sys
with open(sys.argv[1], 'rb') as f:
    f.seek(int(sys.argv[2])); assert len(f.read(1 << 20)) == 1 << 20
" "$mnt/model.safetensors" "$offset"
random_sent=$(( $(sent) - before ))
unmount

# One tensor through safetensors.
mount_fresh
before=$(sent)
t0=$(now)
read -r tensor_bytes tensor_read_s < <("$python" -c "
import sys, time
from safetensors import safe_open
t0 = time.perf_counter()
with safe_open(sys.argv[1], framework='numpy') as f:
    t = f.get_tensor('layers.42.weight')
print(t.nbytes, f'{time.perf_counter() - t0:.3f}')
" "$mnt/model.safetensors")
tensor_s=$(echo "$(now) - $t0" | bc)
tensor_sent=$(( $(sent) - before ))
unmount

# One column through pyarrow.
mount_fresh
before=$(sent)
t0=$(now)
read -r column_rows column_read_s < <("$python" -c "
import sys, time
import pyarrow.parquet as pq
t0 = time.perf_counter()
rows = pq.read_table(sys.argv[1], columns=['c']).num_rows
print(rows, f'{time.perf_counter() - t0:.3f}')
" "$mnt/table.parquet")
column_s=$(echo "$(now) - $t0" | bc)
column_sent=$(( $(sent) - before ))
unmount

# Sequential: the whole checkpoint through the mount ...
mount_fresh
sync
t0=$(now)
cat "$mnt/model.safetensors" > /dev/null
cat_s=$(echo "$(now) - $t0" | bc)
rss_kib=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$mount_pid/status")
unmount
# ... against the agent's own download of it, in the whole `git lfs fetch` of the file.
: > "$work/agent.log"
t0=$(now)
(cd "$clone" && GIT_XET_CACHE_DIR="$work/cache-fetch" git lfs fetch -I model.safetensors >/dev/null)
fetch_model_s=$(echo "$(now) - $t0" | bc)
agent_s=$(grep -o ' done oid=.* secs=[0-9.]*' "$work/agent.log" | sed 's/.*secs=//' | sort -n | tail -1)
# The whole Parquet file by `git lfs fetch`, which a column read competes with.
t0=$(now)
(cd "$clone" && GIT_XET_CACHE_DIR="$work/cache-fetch-table" git lfs fetch -I table.parquet >/dev/null)
fetch_table_s=$(echo "$(now) - $t0" | bc)
rm -rf "$work/cache-fetch" "$work/cache-fetch-table"

pct() { echo "scale=2; 100 * $1 / $2" | bc; }
kib() { echo "scale=1; $1 / 1024" | bc; }
mbs() { echo "scale=1; $model_size / $1 / 1000000" | bc; }
echo
echo "checkpoint: $model_size bytes (100 tensors of 1%); table: $table_size bytes (4 columns); $lfs_version"
printf '%-44s %-24s %s\n' "measure" "value" "goal"
printf '%-44s %-24s %s\n' "mount ready" "${ready_s}s" "< 1 s"
printf '%-44s %-24s %s\n' "ls -l of the tree: bytes sent" "$ls_sent" "0"
printf '%-44s %-24s %s\n' "first 64 KiB: bytes sent" "$head_sent ($(kib "$head_sent") KiB)" "< 256 KiB"
printf '%-44s %-24s %s\n' "1 MiB at offset $offset: bytes sent" "$random_sent ($(kib "$random_sent") KiB)" "< 2048 KiB"
printf '%-44s %-24s %s\n' "one tensor ($tensor_bytes bytes): bytes sent" "$tensor_sent ($(pct "$tensor_sent" "$model_size")% of file)" "< 3% of the file"
printf '%-44s %-24s %s\n' "one tensor: time (with Python's start)" "${tensor_s}s" ""
printf '%-44s %-24s %s\n' "one tensor: safe_open + get_tensor" "${tensor_read_s}s" ""
printf '%-44s %-24s %s\n' "  / git lfs fetch of the checkpoint (${fetch_model_s}s)" "$(echo "scale=2; $tensor_read_s / $fetch_model_s" | bc)" "<= 0.20"
printf '%-44s %-24s %s\n' "one Parquet column ($column_rows rows): bytes sent" "$column_sent ($(pct "$column_sent" "$table_size")% of file)" "(a quarter of the table)"
printf '%-44s %-24s %s\n' "one Parquet column: time (with Python's start)" "${column_s}s" ""
printf '%-44s %-24s %s\n' "one Parquet column: read_table" "${column_read_s}s" ""
printf '%-44s %-24s %s\n' "  / git lfs fetch of the table (${fetch_table_s}s)" "$(echo "scale=2; $column_read_s / $fetch_table_s" | bc)" "<= 0.50"
printf '%-44s %-24s %s\n' "sequential cat through the mount" "${cat_s}s ($(mbs "$cat_s") MB/s)" ""
printf '%-44s %-24s %s\n' "the agent's own download (git lfs fetch)" "${agent_s}s ($(mbs "$agent_s") MB/s)" ""
printf '%-44s %-24s %s\n' "mount speed / agent speed" "$(echo "scale=2; $agent_s / $cat_s" | bc)x" ">= 0.7x"
printf '%-44s %-24s %s\n' "mount process peak RSS" "$(kib "$rss_kib") MiB" "< 200 MiB"
echo "$listing" | sed 's/^/  ls: /'
