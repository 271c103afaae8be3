#!/usr/bin/env bash
# Benchmark: ingest and download throughput of `git xet serve` on its directory backend and on
# a real S3-compatible object store (a single-node Garage started here), with one node and with
# two nodes sharing the bucket.
#
# Usage: bench/storage.sh [SIZE_MIB]
#
#   SIZE_MIB             size of each of the two test files in MiB (default 256)
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` (default: .venv/bin/python, then /tmp/hfvenv)
#   GARAGE               the Garage binary (default: on PATH, then ~/.cargo/bin/garage)
#   GIT_XET_BENCH_SETUPS the setups to run after `directory` (default: garage-1 garage-2
#                        garage-urls small-files)
#   GIT_XET_BENCH_SMALL  the number of files of the small-files setup (default 1000)
#   GIT_XET_BENCH_REPLICAS  1 (default): one Garage node; 3: three nodes keeping three copies,
#                        each server given all three endpoints (GIT_XET_S3_ENDPOINTS)
#   GIT_XET_BENCH_GARAGE_DB  Garage's metadata engine: sqlite (default) or lmdb (what
#                        deploy/garage/garage.toml uses; needs a Garage built with it)
#   GIT_XET_BENCH_GARAGE_COMPRESSION  Garage's zstd level (default 1) or none (deploy's choice)
#   GIT_XET_BENCH_HOOK   1 (default): standalone repositories set up with `git xet install
#                        --local --endpoint`, whose pre-push hook uploads a push's small files
#                        in packs first (`git xet upload-ahead`); 0: git-lfs's hook only
#
# The client is the reference client (hf_xet): two files of mixed data (see bench/lib.sh) are
# uploaded at once, each by its own Python process with a fresh cache, then downloaded at once
# the same way. Setups:
#   directory   one server on a store directory (both clients talk to it)
#   garage-1    one node on a Garage bucket (both clients talk to it)
#   garage-2    two nodes on one Garage bucket: file 1 is uploaded through node A and file 2
#               through node B; then file 1 is downloaded through B and file 2 through A (each
#               node serves what the other stored)
#   garage-urls one node with --storage-urls: reconstructions name presigned URLs of the bucket,
#               so downloads read from Garage directly instead of through the node
# Nodes keep copies of the xorbs they store on their own disk (`--xorb-cache`, on by default):
# garage-1's downloads read the node's disk, garage-2's cross-node downloads read the bucket.
# Then, on the directory and on garage-1, plain git-lfs's basic transfer of the second file: a
# PUT through the node, then a GET, which the node rebuilds from the stored xorbs; and the same
# GET through garage-1-cold, a node on garage-1's bucket with `--xorb-cache 0` (every read from
# the bucket).
#   small-files N files of 1-100 KiB pushed with git through git-xet's agent to a directory
#               node, and to node A of two nodes on a fresh bucket; then a fresh clone's
#               `git lfs fetch` from the directory node, and through node B (which must catch up
#               with A's shards). Twice: in standalone mode (the agent gets one object at a
#               time: a xorb and a shard per file), and negotiated (the node is the LFS server:
#               its batch answers deal small objects into packs, docs/lfs-agent.md §12.4, and
#               a fetch's into download packs of neighbours, §12.5). Then a
#               node started on an empty disk on the standalone run's bucket: seconds until it is
#               ready and until every file's SHA-256 claim is settled (-1: not within 20 min)
# Prints the wall time of each phase, the peak RSS of the nodes of each setup, the CPU seconds
# the nodes and Garage spent during each ingest and small-file push (and git, git-lfs and the
# agents during the push), the requests each small-file push cost the node pushed to and the
# node that catches up with it, the throughput (MB = 10^6 bytes/s, both files together),
# and the ratios against the directory backend. Everything runs on this machine (Garage,
# servers, clients), so these measure the whole system on shared cores, not a deployment.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-256}"
# The setups to run besides `directory` (always first: the others are compared with it).
setups="${GIT_XET_BENCH_SETUPS:-garage-1 garage-2 garage-urls small-files}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_hf_python

find_garage

build_release
make_work storage-bench

start_garage one two three four five

# --- inputs ---------------------------------------------------------------------------------
write_mixed "$work/in1.bin" "$size_mib"
# The second file: the first one with every byte changed (a byte map), so that the two share no
# chunk but compress alike.
"$python" - "$work/in1.bin" "$work/in2.bin" <<'PY'
import sys
table = bytes((b ^ 0x5A) for b in range(256))
with open(sys.argv[1], "rb") as src, open(sys.argv[2], "wb") as dst:
    while block := src.read(8 << 20):
        dst.write(block.translate(table))
PY
size=$(( $(stat -c %s "$work/in1.bin") + $(stat -c %s "$work/in2.bin") ))

# hf MODE URL CACHE FILE [HASH SIZE]: one hf_xet upload or download; prints the Xet hash and size
# (upload) or "ok" (download).
hf() {
    HF_HOME="$work/$3" HF_XET_CACHE="$work/$3/xet" HF_XET_TELEMETRY_ENABLED=false \
        "$python" - "$@" "$token" <<'PY'
import sys, time, hf_xet
mode, url, cache, path = sys.argv[1:5]
token = sys.argv[-1]
tok = (token, int(time.time()) + 3600)
if mode == "up":
    r = hf_xet.upload_files([path], url, tok, None, None, "model")[0]
    print(r.hash, r.file_size)
else:
    h, n = sys.argv[5], int(sys.argv[6])
    hf_xet.download_files([hf_xet.PyXetDownloadInfo(path, h, n)], url, tok, None, None)
    print("ok")
PY
}

now() { date +%s.%N; }
# peak_rss PID...: the largest peak RSS (VmHWM, MiB) of the servers PID... so far.
peak_rss() {
    local p kib max=0
    for p in "$@"; do
        kib=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$p/status" 2>/dev/null || echo 0)
        (( ${kib:-0} > max )) && max=${kib:-0}
    done
    echo $(( max / 1024 ))
}
results=()
rss_results=()
cpu_results=()
# The servers of the setup run_setup times (their peak RSS is noted after the ingest and after
# the downloads).
setup_pids=()
# run_setup NAME URL_UP1 URL_UP2 URL_DOWN1 URL_DOWN2
run_setup() {
    local name=$1 t0 t1 t2 h1 h2 cpu_node cpu_garage
    sync
    cpu_node=$(cpu_seconds "${setup_pids[@]}")
    cpu_garage=$(cpu_seconds "${garage_pids[@]}")
    t0=$(now)
    hf up "$2" "$name-c1" "$work/in1.bin" > "$work/$name.h1" &
    local p1=$!
    hf up "$3" "$name-c2" "$work/in2.bin" > "$work/$name.h2" &
    wait $p1 $!
    t1=$(now)
    read -r h1 n1 < "$work/$name.h1"
    read -r h2 n2 < "$work/$name.h2"
    sync
    t1=$(now)
    cpu_node=$(echo "$(cpu_seconds "${setup_pids[@]}") - $cpu_node" | bc -l)
    cpu_garage=$(echo "$(cpu_seconds "${garage_pids[@]}") - $cpu_garage" | bc -l)
    local t_up rss_up
    t_up=$(echo "$t1 - $t0" | bc -l)
    rss_up=$(peak_rss "${setup_pids[@]}")
    t0=$(now)
    hf down "$4" "$name-d1" "$work/$name-out1.bin" "$h1" "$n1" >/dev/null &
    p1=$!
    hf down "$5" "$name-d2" "$work/$name-out2.bin" "$h2" "$n2" >/dev/null &
    wait $p1 $!
    t2=$(now)
    local t_down
    t_down=$(echo "$t2 - $t0" | bc -l)
    cmp -s "$work/in1.bin" "$work/$name-out1.bin" && cmp -s "$work/in2.bin" "$work/$name-out2.bin" \
        || { echo "bench: $name: downloaded bytes differ" >&2; exit 1; }
    rm -f "$work/$name-out1.bin" "$work/$name-out2.bin"
    results+=("$name $t_up $t_down")
    rss_results+=("$name $rss_up $(peak_rss "${setup_pids[@]}")")
    cpu_results+=("$name $cpu_node $cpu_garage")
    printf 'bench: %-12s ingest %6.2f s  download %6.2f s\n' "$name" "$t_up" "$t_down" >&2
}

basic_results=()
# run_basic NAME URL: plain git-lfs's basic transfer through the node: a PUT of the second file's
# bytes as an LFS object, then a GET of it (the node rebuilds it from the stored xorbs), each
# timed with curl as git-lfs would send them.
run_basic() {
    local name=$1 url=$2 oid t0 t1 t2
    oid=$(sha256sum "$work/in2.bin" | cut -d' ' -f1)
    local obj="$url/bench/basic.git/info/lfs/objects/$oid"
    sync
    t0=$(now)
    curl -sf -u "git:$token" -T "$work/in2.bin" -o /dev/null "$obj" \
        || { echo "bench: $name: basic upload failed" >&2; exit 1; }
    t1=$(now)
    curl -sf -u "git:$token" -o "$work/$name-basic.bin" "$obj" \
        || { echo "bench: $name: basic download failed" >&2; exit 1; }
    t2=$(now)
    cmp -s "$work/in2.bin" "$work/$name-basic.bin" \
        || { echo "bench: $name: basic download differs" >&2; exit 1; }
    rm -f "$work/$name-basic.bin"
    basic_results+=("$name $(echo "$t1 - $t0" | bc -l) $(echo "$t2 - $t1" | bc -l)")
}

wanted() { [[ " $setups " == *" $1 "* ]]; }
start_server dir
setup_pids=("${pids[-1]}")
run_setup directory "$server_url" "$server_url" "$server_url" "$server_url"
run_basic directory "$server_url"
if wanted garage-1; then
    start_server g1 --storage s3://one
    setup_pids=("${pids[-1]}")
    run_setup garage-1 "$server_url" "$server_url" "$server_url" "$server_url"
    run_basic garage-1 "$server_url"
    # The same through a node that keeps no copies of xorbs: every read goes to the bucket.
    start_server g1c --storage s3://one --xorb-cache 0
    for _ in $(seq 1 600); do
        [[ "$(curl -s -o /dev/null -w '%{http_code}' "$server_url/ready")" == 200 ]] && break
        sleep 0.1
    done
    # It settles the SHA-256 claims of what it caught up with (from garage-1's records, or by
    # reading the files) before the timed GET, as garage-1 had.
    settle_server "$server_url"
    run_basic garage-1-cold "$server_url"
fi
if wanted garage-2; then
    start_server g2a --storage s3://two
    url_a="$server_url"
    start_server g2b --storage s3://two
    url_b="$server_url"
    setup_pids=("${pids[-2]}" "${pids[-1]}")
    run_setup garage-2 "$url_a" "$url_b" "$url_b" "$url_a"
fi
if wanted garage-urls; then
    start_server g1u --storage s3://three --storage-urls
    setup_pids=("${pids[-1]}")
    run_setup garage-urls "$server_url" "$server_url" "$server_url" "$server_url"
fi

small_results=()
# storage_snapshot URL FILE: the node's object-storage requests so far (`gitxet_storage_requests_total`
# and `gitxet_storage_request_seconds_total`, one line per kind) and its answered HTTP requests.
storage_snapshot() {
    curl -s "$1/metrics" | grep -E '^gitxet_(storage_request|http_requests_total)' > "$2" || true
}
# storage_delta BEFORE AFTER: what a node sent to object storage between two snapshots, by kind:
# count and total seconds (summed over concurrent requests), then its answered HTTP requests by
# route; on stderr.
storage_delta() {
    awk 'FILENAME == ARGV[1] { a[$1] = $2; next }
         { d = $2 - a[$1]; if (d <= 0) next
           if ($1 ~ /^gitxet_http/) {
               match($1, /route="[^"]*"/); r = substr($1, RSTART + 7, RLENGTH - 8)
               match($1, /method="[^"]*"/); m = substr($1, RSTART + 8, RLENGTH - 9)
               if (r == "/metrics") next
               http[m " " r] += d; next }
           match($1, /op="[^"]*"/); op = substr($1, RSTART + 4, RLENGTH - 5)
           if ($1 ~ /seconds/) secs[op] += d; else n[op] += d }
         END { line = "bench:   object storage:"
               for (op in n) line = line sprintf(" %s %d (%.1f s)", op, n[op], secs[op])
               print line
               for (k in http) printf "bench:   http %6d %s\n", http[k], k }' "$1" "$2" >&2
}
# run_small NAME PUSH_URL FETCH_URL MODE: N small files pushed with git to PUSH_URL, then a fresh
# clone's `git lfs fetch` from FETCH_URL, in MODE (standalone: the node is the agent's endpoint;
# negotiated: the node is the LFS server); "name push fetch" in small_results.
run_small() {
    local name=$1 mode=$4 t0 t1 t2
    (
        use_home "$work/$name-home"
        push_setup "$name" "$mode" "$2" "$work/small"
        sync
        storage_snapshot "$2" "$work/$name.push0"
        [[ "$3" == "$2" ]] || storage_snapshot "$3" "$work/$name.other0"
        local cpu_servers cpu_node cpu_garage cpu_client me=$BASHPID node=${server_pid_at[$2]}
        cpu_servers=$(cpu_seconds "${server_pids[@]}")
        cpu_node=$(cpu_seconds "$node")
        cpu_garage=$(cpu_seconds "${garage_pids[@]}")
        cpu_client=$(child_cpu_seconds "$me")
        t0=$(now)
        git push -q origin main >/dev/null 2>&1 || { echo "bench: $name: push failed" >&2; exit 1; }
        t1=$(now)
        storage_snapshot "$2" "$work/$name.push1"
        echo "bench: $name push: what the node did" >&2
        storage_delta "$work/$name.push0" "$work/$name.push1"
        if [[ "$3" != "$2" ]]; then
            storage_snapshot "$3" "$work/$name.other1"
            echo "bench: $name push: what the node fetched from did meanwhile (catching up)" >&2
            storage_delta "$work/$name.other0" "$work/$name.other1"
        fi
        cpu_node=$(echo "$(cpu_seconds "$node") - $cpu_node" | bc -l)
        printf 'bench:   CPU seconds: git, git-lfs and agents %.2f, the node pushed to %.2f, other nodes %.2f, Garage %.2f\n' \
            "$(echo "$(child_cpu_seconds "$me") - $cpu_client" | bc -l)" "$cpu_node" \
            "$(echo "$(cpu_seconds "${server_pids[@]}") - $cpu_servers - $cpu_node" | bc -l)" \
            "$(echo "$(cpu_seconds "${garage_pids[@]}") - $cpu_garage" | bc -l)" >&2
        cd "$work"
        GIT_LFS_SKIP_SMUDGE=1 git clone -q "$name-remote.git" "$name-clone"
        cd "$name-clone"
        if [[ "$mode" == standalone ]]; then
            export GIT_XET_ENDPOINT="$3"
        else
            git config lfs.url "$3/bench/$name.git/info/lfs"
        fi
        storage_snapshot "$3" "$work/$name.fetch0"
        t1b=$(now)
        git lfs fetch >/dev/null 2>&1 || { echo "bench: $name: fetch failed" >&2; exit 1; }
        t2=$(now)
        storage_snapshot "$3" "$work/$name.fetch1"
        echo "bench: $name fetch: what the node fetched from did" >&2
        storage_delta "$work/$name.fetch0" "$work/$name.fetch1"
        local got
        got=$(find .git/lfs/objects -type f | wc -l)
        [[ "$got" == "$small_n" ]] || { echo "bench: $name fetched $got of $small_n" >&2; exit 1; }
        echo "$name $(echo "$t1 - $t0" | bc -l) $(echo "$t2 - $t1b" | bc -l)" > "$work/$name.small"
    ) || exit 1
    small_results+=("$(cat "$work/$name.small")")
    printf 'bench: %-12s push %6.2f s  fetch %6.2f s\n' $(cat "$work/$name.small") >&2
}
if wanted small-files; then
    use_recent_git_lfs
    small_n="${GIT_XET_BENCH_SMALL:-1000}"
    mkdir -p "$work/small"
    for i in $(seq 1 "$small_n"); do
        head -c $(( (i * 99 / small_n + 1) * 1024 )) /dev/urandom > "$work/small/f$i.bin"
    done
    start_server small-dir
    run_small small-dir "$server_url" "$server_url" standalone
    start_server lfs-dir
    run_small lfs-dir "$server_url" "$server_url" negotiated
    start_server small-a --storage s3://four
    url_a="$server_url"
    start_server small-b --storage s3://four
    url_b="$server_url"
    run_small small-garage "$url_a" "$url_b" standalone
    # A node started on an empty disk on that bucket: how long until it is ready (every shard
    # registered once) and until every file's SHA-256 claim is settled.
    t0=$(date +%s.%N)
    start_server small-c --storage s3://four
    fresh_ready="" fresh_settled=""
    for _ in $(seq 1 6000); do
        health=$(curl -s "$server_url/health" || true)
        if [[ -z "$fresh_ready" ]] && [[ "$(curl -s -o /dev/null -w '%{http_code}' "$server_url/ready")" == 200 ]]; then
            fresh_ready=$(echo "$(date +%s.%N) - $t0" | bc -l)
        fi
        if [[ -n "$fresh_ready" && "$health" == *'"unchecked_sha256_claims":0'* ]]; then
            fresh_settled=$(echo "$(date +%s.%N) - $t0" | bc -l)
            break
        fi
        sleep 0.2
    done
    start_server lfs-a --storage s3://five
    url_a="$server_url"
    start_server lfs-b --storage s3://five
    url_b="$server_url"
    run_small lfs-garage "$url_a" "$url_b" negotiated
fi

echo
echo "two files of $size_mib MiB each ($size bytes together), hf_xet $("$python" -c 'import importlib.metadata as m; print(m.version("hf-xet"))'), uploaded at once, then downloaded at once"
printf '%-12s %10s %12s %10s %12s %14s %16s\n' setup "ingest s" "ingest MB/s" "down s" "down MB/s" "ingest vs dir" "download vs dir"
read -r _ dir_up dir_down <<<"${results[0]}"
for r in "${results[@]}"; do
    read -r name up down <<<"$r"
    printf '%-12s %10.2f %12.1f %10.2f %12.1f %13.2fx %15.2fx\n' "$name" "$up" \
        "$(echo "$size / $up / 1000000" | bc -l)" "$down" "$(echo "$size / $down / 1000000" | bc -l)" \
        "$(echo "$dir_up / $up" | bc -l)" "$(echo "$dir_down / $down" | bc -l)"
done
echo "(ratios above 1: faster than the directory backend)"
echo "Garage: ${GIT_XET_BENCH_REPLICAS:-1} node(s), as many copies of each object"
for r in "${rss_results[@]}"; do
    read -r name up down <<<"$r"
    printf 'node peak RSS (VmHWM) %-12s after the ingest %5d MiB, after the downloads %5d MiB\n' \
        "$name" "$up" "$down"
done
for r in "${cpu_results[@]}"; do
    read -r name node garage <<<"$r"
    printf 'CPU seconds during the ingest  %-12s nodes %6.2f  Garage %6.2f\n' "$name" "$node" "$garage"
done
echo
echo "plain git-lfs basic transfer of one $size_mib MiB file through the node (PUT, then GET)"
printf '%-14s %10s %12s %10s %12s %16s\n' setup "put s" "put MB/s" "get s" "get MB/s" "get vs dir"
read -r _ dir_put dir_get <<<"${basic_results[0]}"
one=$((size / 2))
for r in "${basic_results[@]}"; do
    read -r name put get <<<"$r"
    printf '%-14s %10.2f %12.1f %10.2f %12.1f %15.2fx\n' "$name" "$put" \
        "$(echo "$one / $put / 1000000" | bc -l)" "$get" "$(echo "$one / $get / 1000000" | bc -l)" \
        "$(echo "$dir_get / $get" | bc -l)"
done
if [[ ${#small_results[@]} -gt 0 ]]; then
    echo
    echo "$small_n files of 1-100 KiB, $lfs_version: git push through the agent, then a fresh clone's git lfs fetch"
    printf '%-14s %10s %10s %14s %16s\n' setup "push s" "fetch s" "push vs dir" "fetch vs dir"
    for r in "${small_results[@]}"; do
        read -r name p f <<<"$r"
        # Each mode's rows against its own directory row.
        for d in "${small_results[@]}"; do
            read -r dname dp df <<<"$d"
            [[ "$dname" == "${name%%-*}-dir" ]] && break
        done
        printf '%-14s %10.2f %10.2f %13.2fx %15.2fx\n' "$name" "$p" "$f" \
            "$(echo "$dp / $p" | bc -l)" "$(echo "$df / $f" | bc -l)"
    done
    if [[ -n "${fresh_ready:-}" ]]; then
        printf 'a node started on an empty disk on small-garage'"'"'s bucket: ready after %.1f s, every claim settled after %.1f s\n' \
            "$fresh_ready" "${fresh_settled:--1}"
    fi
    echo "(small-*: standalone mode, the node is the agent's endpoint; lfs-*: negotiated, the node is the"
    echo " LFS server and packs small objects; *-garage: pushed through node A, fetched through node B;"
    echo " ratios above 1: faster than the directory node of the same mode)"
fi
