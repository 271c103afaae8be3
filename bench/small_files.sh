#!/usr/bin/env bash
# Benchmark: many small files. `git push` and `git lfs fetch` of N files of 1-100 KiB through
# plain git-lfs (basic transfers, no agent), git-xet negotiated (the agent, against the LFS
# server of `git xet serve`) and git-xet embedded (standalone mode with a directory store).
#
# Usage: bench/small_files.sh [N]
#
#   N                    how many files (default 1000)
#   GIT_XET_BENCH_LFS    a directory holding git-lfs 3.6 or newer (see bench/lib.sh)
#   GIT_XET_BENCH_RUNS   how many rounds of fetches are timed (default 5; medians are shown)
#   GIT_XET_BENCH_HOOK   1 (default): the embedded repository also gets `git xet install --local
#                        --endpoint`, whose pre-push hook sends the push's small files in packs
#                        first (`git xet upload-ahead`); 0: git-lfs's hook only
#
# Each side gets its own release server (or store directory), its own private HOME and caches,
# and the same files (random bytes, sizes spread evenly over 1-100 KiB), committed in one
# commit. `git push` is timed; then a clone without smudge. Then `git lfs fetch` (git-lfs's
# default concurrency, 8 agents) is timed GIT_XET_BENCH_RUNS times in each clone, the sides
# taking turns (a round is one fetch of each side, the floor's too), with .git/lfs/objects
# moved aside before each: a machine that gets busier or quieter during the run shifts every
# side alike. Each timed step starts right after 512 MiB of memory was touched and freed
# (prime_memory in bench/lib.sh). Prints the seconds of each (fetch: the median) and the
# ratios against plain git-lfs (above 1: faster than plain; fetch: the median of the rounds'
# ratios). This is a measurement, not a test.
#
# The last row is the custom-agent floor: the negotiated clone fetched through
# bench/null_agent.rs, an agent that transfers nothing (it writes each object from a local
# copy). It is what git-lfs itself spends on a fetch through any custom agent, so no agent can
# fetch faster than it; its ratio is the most a custom agent can gain on plain git-lfs here.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
n="${1:-1000}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
use_recent_git_lfs
build_release

make_work small-bench
# Built before any HOME of the sides is set (rustup looks for its toolchains under HOME).
# Without a Rust compiler the floor row is left out.
floor=yes
if ! rustc -O --edition 2021 -o "$work/null_agent" "$root/bench/null_agent.rs"; then
    echo "bench: cannot build bench/null_agent.rs (is rustc installed?); no floor row" >&2
    floor=
fi
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$(dirname "$bin"):$PATH"
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }

echo "bench: writing $n files" >&2
mkdir -p "$work/files"
for i in $(seq 1 "$n"); do
    head -c $(( (i * 99 / n + 1) * 1024 )) /dev/urandom > "$work/files/f$i.bin"
done

side() { # name (plain|negotiated|embedded): pushes (the seconds to $work/name.push), clones
    local name="$1"
    use_home "$work/$1-home"
    git init -q --bare "$work/$name-remote.git"
    git init -q "$work/$name-work"
    cd "$work/$name-work"
    git lfs track '*.bin' >/dev/null
    case $name in
        plain|negotiated)
            start_server "$name"
            printf '[lfs]\n\turl = %s/bench/%s.git/info/lfs\n' "$server_url" "$name" > .lfsconfig
            if [[ $name == negotiated ]]; then git xet install --global >/dev/null; fi
            ;;
        embedded)
            git xet install --global --endpoint "$work/embedded-store" >/dev/null
            # As docs/guide.md sets a standalone repository up: its pre-push hook sends the
            # push's small files in packs before git-lfs does (GIT_XET_BENCH_HOOK=0: not).
            if [[ "${GIT_XET_BENCH_HOOK:-1}" == 1 ]]; then
                git xet install --local --endpoint "$work/embedded-store" >/dev/null
            fi
            ;;
    esac
    cp "$work"/files/*.bin .
    git add . && git commit -q -m files
    git remote add origin "../$name-remote.git"
    local t
    prime_memory 512
    t=$(now); git push -q origin main >/dev/null 2>&1; elapsed "$t" > "$work/$name.push"
    cd "$work"
    GIT_LFS_SKIP_SMUDGE=1 git clone -q "$name-remote.git" "$name-clone"
}
# timed_fetch NAME ROUND COMMAND...: the seconds of one run of COMMAND in the current clone,
# after moving .git/lfs/objects aside; checks that every object arrived.
timed_fetch() {
    local name="$1" round="$2" t took got
    shift 2
    # Moved aside, not deleted: ext4 scans past recently deleted inodes (for 60 s) when it
    # allocates new ones, which would make each run pay for the deletes of the one before.
    mkdir -p "$work/trash"
    if [[ -d .git/lfs/objects ]]; then mv .git/lfs/objects "$work/trash/$name-$round-objects"; fi
    if [[ -d .git/lfs/tmp ]]; then mv .git/lfs/tmp "$work/trash/$name-$round-tmp"; fi
    sync
    prime_memory 512 # pages just used, every side alike (prime_memory in bench/lib.sh)
    t=$(now); "$@" >/dev/null 2>&1 || { echo "bench: $name: $* failed" >&2; exit 1; }
    took=$(elapsed "$t")
    got=$(find .git/lfs/objects -type f | wc -l)
    [[ "$got" == "$n" ]] || { echo "bench: $name fetched $got of $n objects" >&2; exit 1; }
    echo "$took"
}
for s in plain negotiated embedded; do
    echo "bench: $s" >&2
    side "$s"
done
read -r pp < "$work/plain.push"
read -r np < "$work/negotiated.push"
read -r ep < "$work/embedded.push"

sides=(plain negotiated embedded)
if [[ -n "$floor" ]]; then
    mkdir -p "$work/by-oid"
    for f in "$work"/files/*.bin; do
        ln "$f" "$work/by-oid/$(sha256sum "$f" | cut -c1-64)"
    done
    sides+=(floor)
fi
# fetch_once SIDE ROUND: one timed fetch of SIDE, in its clone with its HOME (the floor: the
# negotiated clone through bench/null_agent.rs), appended to $work/SIDE.fetch.
fetch_once() (
    local side="$1" round="$2" home="$1" command=(git lfs fetch)
    if [[ $side == floor ]]; then
        home=negotiated
        command=(git -c lfs.customtransfer.xet.path="$work/null_agent"
            -c lfs.customtransfer.xet.args="$work/by-oid" lfs fetch)
    fi
    use_home "$work/$home-home"
    cd "$work/$home-clone"
    timed_fetch "$side" "$round" "${command[@]}" >> "$work/$side.fetch"
)
runs="${GIT_XET_BENCH_RUNS:-5}"
for ((round = 1; round <= runs; round++)); do
    echo "bench: fetch round $round of $runs (${sides[*]})" >&2
    for s in "${sides[@]}"; do fetch_once "$s" "$round"; done
done
median() { sort -n | sed -n "$(( (runs + 1) / 2 ))p"; }
# fetch_ratio SIDE: the median over the rounds of plain's fetch time / SIDE's.
fetch_ratio() {
    paste -d' ' "$work/plain.fetch" "$work/$1.fetch" \
        | while read -r a b; do echo "scale=3; $a / $b" | bc; done | median
}
pf=$(median < "$work/plain.fetch")
nf=$(median < "$work/negotiated.fetch")
ef=$(median < "$work/embedded.fetch")
r() { echo "scale=3; $1 / $2" | bc; }
echo
echo "$n files of 1-100 KiB; $lfs_version; ratios: plain / this (above 1: faster than plain)"
printf '%-28s %8s %8s %10s %10s\n' "" "push s" "fetch s" "push x" "fetch x"
printf '%-28s %8.2f %8.2f\n' "plain git-lfs (basic)" "$pp" "$pf"
printf '%-28s %8.2f %8.2f %9.2fx %9.2fx\n' "git-xet negotiated" "$np" "$nf" "$(r "$pp" "$np")" "$(fetch_ratio negotiated)"
printf '%-28s %8.2f %8.2f %9.2fx %9.2fx\n' "git-xet embedded" "$ep" "$ef" "$(r "$pp" "$ep")" "$(fetch_ratio embedded)"
printf '%-28s %8s %8s %9.2fx %9.2fx\n' "embedded / negotiated time" "" "" "$(r "$ep" "$np")" "$(r "$ef" "$nf")"
if [[ -n "$floor" ]]; then
    ff=$(median < "$work/floor.fetch")
    printf '%-28s %8s %8.2f %9s %9.2fx\n' "custom-agent floor" "" "$ff" "" "$(fetch_ratio floor)"
    echo "(the floor: an agent that transfers nothing; no custom agent can fetch faster)"
fi
echo "fetch seconds by round:"
for s in "${sides[@]}"; do printf '  %-12s %s\n' "$s" "$(tr '\n' ' ' < "$work/$s.fetch")"; done
