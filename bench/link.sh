#!/usr/bin/env bash
# Benchmark: the edit cycle of a model over a slow link, plain git-lfs against git-xet.
#
# Usage: sudo bench/link.sh [RATE]      (root: it makes a network namespace)
#
#   RATE                 the link's rate, as tc writes it (default 100mbit)
#   SIZE_MIB, EDITS      the model's size (default 64) and how many 1 MiB edits follow (3)
#   GIT_XET_BENCH_LFS    a directory holding git-lfs 3.6 or newer (see bench/lib.sh)
#
# The cycle, for each side: push the model, then EDITS times change 1 MiB of it (random bytes
# at a new place), commit and push; then a fresh clone fetches every version
# (`git clone` without smudge, `git lfs fetch --all`) and checks the newest one out; for git-xet
# also the same with its own commands on a third machine (`git xet clone`, then `git xet fetch
# --all`), printed as "own clone". Each side
# has its own release `git xet serve` with an empty store and its own random model, so neither
# deduplicates against the other's data. Plain git-lfs uses basic transfers (no agent); git-xet
# uses the agent in negotiated mode, with empty caches at the start and a fresh cache for the
# clone (another machine).
#
# The link: a private network namespace whose loopback has MTU 1500 and a token bucket
# (`tc qdisc … tbf rate RATE burst 32kb latency 50ms`); servers and clients all run inside it,
# so every byte crosses the limited link once. The namespace is removed afterwards. Nothing
# leaves the machine. Prints each side's push, fetch and total seconds and the ratio
# plain / git-xet (above 1: git-xet is faster), then the requests each server answered in
# each step, by method, route and status (from its /metrics): what every push and the fetch
# cost in round trips. This is a measurement, not a test.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rate="${1:-100mbit}"
size_mib="${SIZE_MIB:-64}"
edits="${EDITS:-3}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"

if [[ "${GIT_XET_LINK_INSIDE:-}" != 1 ]]; then
    [[ "$(id -u)" == 0 ]] || { echo "bench: run as root (it makes a network namespace)" >&2; exit 2; }
    use_recent_git_lfs
    build_release
    ns="git-xet-bench-$$"
    ip netns add "$ns"
    trap 'ip netns delete "$ns" 2>/dev/null || true' EXIT
    ip netns exec "$ns" ip link set lo mtu 1500
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 32kb latency 50ms
    echo "bench: namespace $ns, loopback limited to $rate (MTU 1500)" >&2
    GIT_XET_LINK_INSIDE=1 ip netns exec "$ns" "$0" "$rate"
    exit $?
fi

# Inside the namespace.
use_recent_git_lfs
bin="${GIT_XET_BENCH_BIN:-$root/target/release/git-xet}"
[[ -x "$bin" ]] || { echo "bench: $bin is missing" >&2; exit 2; }
make_work link-bench
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$(dirname "$bin"):$PATH"
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }

# The server's answered requests (`gitxet_http_requests_total`, one line per route, method and
# status) into file $1.
requests() {
    curl -s "$url/metrics" | grep '^gitxet_http_requests_total' > "$1" || true
    curl -s "$url/health" | sed -n 's/.*"sent_xorb_bytes":\([0-9]*\).*/\1/p' > "$1.sent"
}
# The requests answered between two snapshots, as "count METHOD route status", appended to
# $work/$side.requests under the heading $3 with the xorb bytes the server sent meanwhile
# (`sent_xorb_bytes` of /health; 0 for plain git-lfs's basic transfers).
count_requests() { # before after heading
    {
        local sent=$(( $(cat "$2.sent" 2>/dev/null || echo 0) - $(cat "$1.sent" 2>/dev/null || echo 0) ))
        echo "$3 (xorb bytes sent by the server: $sent)"
        awk 'FILENAME == ARGV[1] { a[$1] = $2; next }
             { d = $2 - a[$1]
               if (d <= 0) next
               match($1, /route="[^"]*"/); route = substr($1, RSTART + 7, RLENGTH - 8)
               match($1, /method="[^"]*"/); method = substr($1, RSTART + 8, RLENGTH - 9)
               match($1, /status="[^"]*"/); status = substr($1, RSTART + 8, RLENGTH - 9)
               if (route == "/metrics") next
               printf "    %4d  %s %s %s\n", d, method, route, status }' "$1" "$2" | sort -k3
    } >> "$work/$side.requests"
}

cycle() { # side (plain|xet) -> prints "push_seconds fetch_seconds"
    local side="$1" url h
    start_server "$side"
    url="$server_url"
    h="$work/$side-home"
    use_home "$h"
    if [[ "$side" == xet ]]; then git xet install --global >/dev/null; fi
    git init -q --bare "$work/$side-remote.git"
    git init -q "$work/$side-work"
    cd "$work/$side-work"
    git lfs track '*.bin' >/dev/null
    printf '[lfs]\n\turl = %s/bench/%s.git/info/lfs\n' "$url" "$side" > .lfsconfig
    head -c "$((size_mib << 20))" /dev/urandom > model.bin
    git add . && git commit -q -m v0
    git remote add origin "../$side-remote.git"
    local t push=0 step
    : > "$work/$side.requests"
    requests "$work/before"
    t=$(now); git push -q origin main >/dev/null 2>&1; step=$(elapsed "$t"); push=$(echo "$push + $step" | bc)
    requests "$work/after"; count_requests "$work/before" "$work/after" "  push of the model: ${step} s"
    for k in $(seq 1 "$edits"); do
        dd if=/dev/urandom of=model.bin bs=1M count=1 seek=$((k * size_mib / (edits + 1))) \
            conv=notrunc status=none
        git commit -q -am "edit $k"
        requests "$work/before"
        t=$(now); git push -q origin main >/dev/null 2>&1; step=$(elapsed "$t"); push=$(echo "$push + $step" | bc)
        requests "$work/after"; count_requests "$work/before" "$work/after" "  push of edit $k: ${step} s"
    done
    cp model.bin "$work/$side-newest.bin"
    # Another machine: a fresh cache.
    export GIT_XET_CACHE_DIR="$h/xet-cache-clone"
    cd "$work"
    requests "$work/before"
    t=$(now)
    GIT_LFS_SKIP_SMUDGE=1 git clone -q "$side-remote.git" "$side-clone"
    (cd "$side-clone" && git lfs fetch --all origin >/dev/null && git lfs checkout >/dev/null 2>&1)
    local fetch own=""
    fetch=$(elapsed "$t")
    requests "$work/after"; count_requests "$work/before" "$work/after" "  clone, fetch --all, checkout: ${fetch} s"
    cmp -s "$work/$side-newest.bin" "$side-clone/model.bin" || { echo "bench: $side clone differs" >&2; exit 1; }
    if [[ "$side" == xet ]]; then
        # The same on a third machine with git-xet's own commands: `git xet clone` (HEAD's
        # files fetched in-process, checked out from the local objects), then `git xet fetch
        # --all` (the other versions).
        export GIT_XET_CACHE_DIR="$h/xet-cache-own"
        requests "$work/before"
        t=$(now)
        git xet clone "$side-remote.git" "$side-own" -- -q >/dev/null 2>&1
        (cd "$side-own" && git xet fetch --all >/dev/null 2>&1)
        own=$(elapsed "$t")
        requests "$work/after"; count_requests "$work/before" "$work/after" "  git xet clone, git xet fetch --all: ${own} s"
        cmp -s "$work/$side-newest.bin" "$side-own/model.bin" || { echo "bench: $side own clone differs" >&2; exit 1; }
        [[ "$(find "$side-own/.git/lfs/objects" -type f | wc -l)" == "$((edits + 1))" ]] \
            || { echo "bench: git xet fetch --all did not fetch every version" >&2; exit 1; }
    fi
    echo "$push $fetch $own"
}
echo "bench: $size_mib MiB model, $edits edits of 1 MiB, $lfs_version, link $1" >&2
# Not in a subshell, so that the cleanup trap knows the servers.
cycle plain > "$work/plain.result"
cycle xet > "$work/xet.result"
read -r plain_push plain_fetch < "$work/plain.result"
read -r xet_push xet_fetch own_fetch < "$work/xet.result"
plain_total=$(echo "$plain_push + $plain_fetch" | bc)
xet_total=$(echo "$xet_push + $xet_fetch" | bc)
own_total=$(echo "$xet_push + $own_fetch" | bc)
echo
echo "edit cycle: $size_mib MiB model, $edits edits of 1 MiB, a fresh clone fetching every version; link $1"
printf '%-24s %10s %10s %10s\n' "" "pushes s" "fetch s" "total s"
printf '%-24s %10.1f %10.1f %10.1f\n' "plain git-lfs (basic)" "$plain_push" "$plain_fetch" "$plain_total"
printf '%-24s %10.1f %10.1f %10.1f\n' "git-xet" "$xet_push" "$xet_fetch" "$xet_total"
printf '%-24s %10.2fx %9.2fx %9.2fx\n' "ratio plain / git-xet" \
    "$(echo "scale=3; $plain_push / $xet_push" | bc)" \
    "$(echo "scale=3; $plain_fetch / $xet_fetch" | bc)" \
    "$(echo "scale=3; $plain_total / $xet_total" | bc)"
printf '%-24s %10.1f %10.1f %10.1f\n' "git-xet, own clone" "$xet_push" "$own_fetch" "$own_total"
printf '%-24s %10.2fx %9.2fx %9.2fx\n' "ratio plain / own clone" \
    "$(echo "scale=3; $plain_push / $xet_push" | bc)" \
    "$(echo "scale=3; $plain_fetch / $own_fetch" | bc)" \
    "$(echo "scale=3; $plain_total / $own_total" | bc)"
echo
echo "requests the server answered, per step (count, method, route, status):"
for side in plain xet; do
    echo "$side:"
    cat "$work/$side.requests"
done
