#!/usr/bin/env bash
# Benchmark: `git clone` of a repository with one large LFS file, through the git-xet agent
# against plain git-lfs (basic transfer, no agent), both from the same release `git xet serve`.
#
# Usage: bench/clone.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the LFS file in MiB (default 512)
#   GIT_XET_BENCH_LFS    a directory holding git-lfs 3.6 or newer (default .bench/git-lfs/usr/bin,
#                        written by bench/get-git-lfs.sh, then git-lfs on PATH)
#   BENCH_RUNS           clones per side (default 3); the median counts.
#
# Steps: build the release binary; start a server on 127.0.0.1:0; push one file of random bytes
# through the agent (negotiated mode). Then clone alternately, in two private HOMEs that differ
# only in whether `git xet install --global` ran: with the agent git-lfs downloads through it
# (xet), without it through the server's basic transfer (the server rebuilds the same file from
# the same xorbs). Each clone checks the file out (smudge), so the time is what a user waits for,
# and starts right after memory of twice the file's size was touched and freed (prime_memory in
# bench/lib.sh).
# A third side runs `git xet clone` in the agent's HOME: git clones without git-lfs's downloads,
# git-xet fetches the LFS file in its own process, git checks the pointers out, and git-xet
# writes the work-tree file as the object lands (or copies the object where it could not) and
# records it in git's index.
# A fourth side is the reference client's way: `git clone --no-checkout` (no LFS), then
# hf_xet's `download_files` of the file by its Xet hash from the same server into the work tree
# (timed inside Python, its start not counted); left out without a Python with hf_xet
# (GIT_XET_HF_PYTHON, else .venv/bin/python).
# Prints each side's median seconds and throughput and the ratios basic / git-xet (above 1:
# git-xet is faster), then the floor: the same clone through bench/null_agent.rs, an agent that
# copies the file from a local disk, which no custom agent beats. This is a measurement, not a
# test; everything is removed afterwards.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-512}"
runs="${BENCH_RUNS:-3}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
use_recent_git_lfs
build_release

make_work clone-bench
start_server server
url="$server_url"

bin_dir="$(dirname "$bin")"
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$bin_dir:$PATH"
home() { # name, with-agent -> sets up a HOME
    local h="$work/$1"
    mkdir -p "$h"
    HOME="$h" XDG_CONFIG_HOME="$h/.config" bash -c '
        git config --global user.name bench
        git config --global user.email bench@example.com
        git config --global init.defaultBranch main
        git config --global credential.helper "!f() { test \"\$1\" = get && echo username=git && echo password=$0; }; f"
        git lfs install --skip-repo >/dev/null' "$token"
    if [[ "$2" == yes ]]; then HOME="$h" XDG_CONFIG_HOME="$h/.config" git xet install --global >/dev/null; fi
}
home xet yes
home basic no
home floor no
# The floor: git-lfs cloning through bench/null_agent.rs, which copies each object from a local
# file instead of transferring it (left out without rustc).
floor_agent="$work/null_agent"
if ! rustc -O --edition 2021 -o "$floor_agent" "$root/bench/null_agent.rs"; then
    echo "bench: cannot build bench/null_agent.rs (is rustc installed?); no floor row" >&2
    floor_agent=""
fi
if [[ -n "$floor_agent" ]]; then
    HOME="$work/floor" XDG_CONFIG_HOME="$work/floor/.config" bash -c '
        git config --global lfs.customtransfer.xet.path "$0"
        git config --global lfs.customtransfer.xet.args "$1"
        git config --global lfs.customtransfer.xet.concurrent true' "$floor_agent" "$work/by-oid"
fi
as() { # home-name command...
    local name="$1" h="$work/$1"; shift
    HOME="$h" XDG_CONFIG_HOME="$h/.config" GIT_XET_CACHE_DIR="$h/xet-cache" GIT_XET_LOG="$work/$name.log" "$@"
}

echo "bench: writing $size_mib MiB of random bytes" >&2
head -c "$((size_mib * 1024 * 1024))" /dev/urandom > "$work/input.bin"
size=$(stat -c %s "$work/input.bin")
git init -q --bare -b main "$work/remote.git"
as xet git init -q "$work/repo"
(
    cd "$work/repo"
    as xet git lfs track '*.bin' >/dev/null
    printf '[lfs]\n\turl = %s/bench/repo.git/info/lfs\n' "$url" > .lfsconfig
    cp "$work/input.bin" model.bin
    as xet git add . && as xet git commit -q -m bench
    as xet git remote add origin ../remote.git
    as xet git push -q origin main
)
echo "bench: pushed; cloning $runs times each way with $lfs_version" >&2
oid=$(cd "$work/repo" && git cat-file -p HEAD:model.bin | sed -n 's/^oid sha256://p')
mkdir -p "$work/by-oid" && ln -f "$work/input.bin" "$work/by-oid/$oid"

# The reference client's side needs the file's Xet hash.
python="${GIT_XET_HF_PYTHON:-$root/.venv/bin/python}"
xet_hash=""
if [[ -x "$python" ]] && "$python" -c 'import hf_xet' 2>/dev/null; then
    xet_hash=$("$python" -c 'import sys, hf_xet; print(hf_xet.hash_files([sys.argv[1]])[0].hash)' "$work/input.bin")
else
    echo "bench: no Python with hf_xet (GIT_XET_HF_PYTHON); no hf_xet row" >&2
fi
hf_clone() { # -> prints seconds: git clone --no-checkout, then hf_xet's download of the file
    rm -rf "$work/clone" "$work/hf-cache"
    settle_disk
    prime_memory $(( 2 * size_mib + 256 ))
    local t0 t1 dl
    t0=$(now)
    as basic env GIT_LFS_SKIP_SMUDGE=1 git clone -q --no-checkout "$work/remote.git" "$work/clone"
    t1=$(now)
    dl=$(HF_HOME="$work/hf-cache" HF_XET_CACHE="$work/hf-cache/xet" HF_XET_TELEMETRY_ENABLED=false \
        "$python" - "$url" "$token" "$xet_hash" "$size" "$work/clone/model.bin" <<'PY'
import sys, time
import hf_xet
url, token, xet_hash, size, out = sys.argv[1:6]
info = hf_xet.PyXetDownloadInfo(out, xet_hash, int(size))
t = time.perf_counter()
hf_xet.download_files([info], url, (token, int(time.time()) + 3600), None, None)
print(f"{time.perf_counter() - t:.3f}")
PY
    )
    cmp -s "$work/input.bin" "$work/clone/model.bin" || { echo "bench: hf_xet's download differs" >&2; exit 1; }
    echo "$t1 - $t0 + $dl" | bc
}
now() { date +%s.%N; }
# Before each clone, untimed: the last clone's files are written out (and their removal done),
# so that no side pays for the disk work of the one before it.
settle_disk() { sync; sleep 2; }
clone() { # home-name [xet] -> prints seconds (with "xet": `git xet clone`)
    rm -rf "$work/clone"
    # A fresh cache each time: a clone on a new machine.
    rm -rf "$work/$1/xet-cache"
    settle_disk
    # Pages just used for what the clone writes (the object and its checkout), every side alike:
    # prime_memory in bench/lib.sh explains why.
    prime_memory $(( 2 * size_mib + 256 ))
    local t0 t1 cmd=(git clone -q "$work/remote.git" "$work/clone")
    if [[ "${2:-}" == xet ]]; then cmd=(git xet clone "$work/remote.git" "$work/clone" -- -q); fi
    t0=$(now)
    as "$1" "${cmd[@]}" 2>"$work/clone.err" || {
        cat "$work/clone.err" >&2; exit 1; }
    t1=$(now)
    cmp -s "$work/input.bin" "$work/clone/model.bin" || { echo "bench: $1 clone differs" >&2; head -c 300 "$work/clone/model.bin" >&2; cat "$work/clone.err" >&2; exit 1; }
    echo "$t1 - $t0" | bc
}
: > "$work/xet.log"
xet_times=(); basic_times=(); floor_times=(); xetclone_times=(); hf_times=()
for _ in $(seq 1 "$runs"); do
    basic_times+=("$(clone basic)")
    xet_times+=("$(clone xet)")
    xetclone_times+=("$(clone xet xet)")
    if [[ -n "$xet_hash" ]]; then hf_times+=("$(hf_clone)"); fi
    if [[ -n "$floor_agent" ]]; then floor_times+=("$(clone floor)"); fi
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
basic_s=$(median "${basic_times[@]}")
xet_s=$(median "${xet_times[@]}")
mbs() { echo "scale=1; $size / $1 / 1000000" | bc; }
echo
echo "file: $size bytes of random data; $lfs_version; median of $runs clones each"
printf '%-34s %9s %10s   %s\n' "" "seconds" "MB/s" "all runs"
printf '%-34s %9.2f %10s   %s\n' "git clone, plain git-lfs (basic)" "$basic_s" "$(mbs "$basic_s")" "${basic_times[*]}"
printf '%-34s %9.2f %10s   %s\n' "git clone, git-xet agent" "$xet_s" "$(mbs "$xet_s")" "${xet_times[*]}"
agent_s=$(grep -o ' done oid=.* secs=[0-9.]*' "$work/xet.log" | sed 's/.*secs=//' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
printf '%-34s %9.2f %10s   %s\n' "  the agent's download request" "$agent_s" "$(mbs "$agent_s")" "(median; the rest is git and git-lfs)"
printf '%-34s %9.2fx\n' "ratio basic / git-xet" "$(echo "scale=3; $basic_s / $xet_s" | bc)"
xetclone_s=$(median "${xetclone_times[@]}")
printf '%-34s %9.2f %10s   %s\n' "git xet clone (in-process fetch)" "$xetclone_s" "$(mbs "$xetclone_s")" "${xetclone_times[*]}"
printf '%-34s %9.2fx\n' "ratio basic / git xet clone" "$(echo "scale=3; $basic_s / $xetclone_s" | bc)"
if [[ -n "$xet_hash" ]]; then
    hf_s=$(median "${hf_times[@]}")
    printf '%-34s %9.2f %10s   %s\n' "clone -n + hf_xet download_files" "$hf_s" "$(mbs "$hf_s")" "${hf_times[*]}"
    printf '%-34s %9.2fx\n' "ratio hf_xet / git xet clone" "$(echo "scale=3; $hf_s / $xetclone_s" | bc)"
fi
if [[ -n "$floor_agent" ]]; then
    floor_s=$(median "${floor_times[@]}")
    printf '%-34s %9.2f %10s   %s\n' "git clone, floor (null agent)" "$floor_s" "$(mbs "$floor_s")" "${floor_times[*]}"
    echo "  the floor is git-lfs cloning through an agent that only copies the file from a local"
    echo "  disk (bench/null_agent.rs): no custom agent clones faster. Against basic it would be"
    echo "  $(echo "scale=2; $basic_s / $floor_s" | bc)x; git-xet's clone takes $(echo "scale=2; $xet_s / $floor_s" | bc)x the floor's time."
fi
