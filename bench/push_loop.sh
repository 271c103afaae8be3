#!/usr/bin/env bash
# Soak run: the push of many small files through a node on Garage, again and again, until one
# fails or every run passed. A push of 10,003 objects once failed after 8,349 of them (issue 26);
# this is how to look for that.
#
# Usage: bench/push_loop.sh [RUNS]
#
#   RUNS                 how many pushes (default 20)
#   GIT_XET_BENCH_SMALL  files per push (default 10003, of 1-100 KiB of random bytes)
#   GIT_XET_BENCH_MODE   standalone (default: the node is the agent's endpoint, as when it
#                        failed) or negotiated (the node is the LFS server; small objects packed)
#   GIT_XET_BENCH_LFS    a directory holding git-lfs 3.6 or newer (see bench/lib.sh)
#   GARAGE               the Garage binary (default: on PATH, then ~/.cargo/bin/garage)
#
# One Garage node and one release `git xet serve` on a bucket of its own are started here; each
# run pushes the same files from a fresh repository to a fresh bucket prefix (an empty store)
# through a fresh node, then checks that git exited 0 and that the node registered every file.
# Prints each run's seconds; on a failure, the tail of git's output and of the node's log, and
# exits 1. git's automatic gc runs in the foreground here (gc.autoDetach false): committing
# 10,003 files leaves more loose objects than gc.auto allows, and a gc in the background packs
# and deletes them while git-lfs's pre-push scan reads them, which stops the push with
# `ref "main":: missing object: <sha>` (git and git-lfs, without git-xet; GIT_XET_BENCH_GC=background
# keeps git's default to see it; git-xet's pre-push hook waits for such a gc). Everything listens on 127.0.0.1 and is removed at the end (GIT_XET_BENCH_KEEP=1
# keeps it). This is a soak test to run by hand, not part of the test suite.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${1:-20}"
n="${GIT_XET_BENCH_SMALL:-10003}"
mode="${GIT_XET_BENCH_MODE:-standalone}"
[[ "$mode" == standalone || "$mode" == negotiated ]] \
    || { echo "bench: GIT_XET_BENCH_MODE is standalone or negotiated, not $mode" >&2; exit 2; }

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_garage
build_release
make_work push-loop
use_recent_git_lfs
start_garage loop

echo "bench: writing $n files" >&2
mkdir -p "$work/files"
for i in $(seq 1 "$n"); do
    head -c $(( (i * 99 / n + 1) * 1024 )) /dev/urandom > "$work/files/f$i.bin"
done

now() { date +%s.%N; }
passed=0
for run in $(seq 1 "$runs"); do
    start_server "node$run" --storage "s3://loop/run$run"
    node="$server_url"
    out="$work/run$run.out"
    t0=$(now)
    status=0
    (
        use_home "$work/home$run"
        # use_home runs git's gc in the foreground; GIT_XET_BENCH_GC=background restores git's default.
        [[ "${GIT_XET_BENCH_GC:-}" != background ]] || git config --global gc.autoDetach true
        push_setup "run$run" "$mode" "$node" "$work/files"
        git push origin main
    ) > "$out" 2>&1 || status=$?
    t1=$(now)
    files=$(curl -sf "$node/health" | "${python:-python3}" -c 'import json,sys; print(json.load(sys.stdin)["files"])' || echo "?")
    printf 'bench: run %2d of %d: %7.1f s, git exit %d, %s of %d files registered\n' \
        "$run" "$runs" "$(echo "$t1 - $t0" | bc -l)" "$status" "$files" "$n"
    if [[ "$status" != 0 || "$files" != "$n" ]]; then
        echo "bench: run $run failed; the end of git's output:" >&2
        tail -n 30 "$out" >&2
        echo "bench: the end of the node's log ($work/node$run.log):" >&2
        tail -n 30 "$work/node$run.log" >&2
        exit 1
    fi
    passed=$((passed + 1))
    # Each run's node, repositories and homes go; the bucket keeps its prefix.
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
    rm -rf "$work/run$run-work" "$work/run$run-remote.git" "$work/home$run" "$work/node$run-store"
done
echo "$passed of $runs pushes of $n files ($mode, $(git-lfs version | cut -d' ' -f1)) passed"
