#!/usr/bin/env bash
# Benchmark: `git push` / `git lfs fetch` through the git-xet agent against the reference
# client's `hf_xet.upload_files` / `download_files`, each against its own fresh `git xet serve`.
#
# Usage: bench/push_pull.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the test data in MiB (default 512)
#   GIT_XET_BENCH_FILES  how many files the data is cut into (default 1; e.g. 4 for a model
#                        sharded into four files); both sides move all of them in one command
#   GIT_XET_BENCH_DATA   unique (default): 8 MiB stripes of random bytes and of distinct text
#                        lines, nothing repeated; mixed: a quarter each of random bytes, text
#                        lines, zeros and a repeated 64 KiB block (easy for any deduplicating
#                        client)
#   GIT_XET_BENCH_RUNS   rounds (default 3); every figure printed is the median of the rounds
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` installed (default: .venv/bin/python in the crate
#                        root, then /tmp/hfvenv/bin/python)
#
# Steps: build the release binary; write the file. Then, each round, with two new release
# servers on 127.0.0.1:0 (empty stores) and new caches:
#   reference: hf_xet uploads the file to server A and downloads it by Xet hash (fresh cache),
#              each in its own Python process; wall time and the process's peak RSS (getrusage).
#   git-xet:   in a private HOME, `git xet install` (negotiated mode: the LFS server of server B
#              chooses xet), the file is committed (not timed: hashing by `git add` is git-lfs's),
#              `git push` is timed; then a clone with GIT_LFS_SKIP_SMUDGE=1 and a timed
#              `git lfs fetch` (download into .git/lfs/objects, like hf_xet's download into a
#              file); `git lfs checkout` is timed separately. Peak RSS is the largest `VmHWM` an
#              agent process logged at exit (git-lfs runs up to 8).
#   pull:      a clone made before the push (GIT_LFS_SKIP_SMUDGE=1, of a first commit without
#              the data) runs a timed `git xet pull`: git's pull, the new files fetched by
#              git-xet in its own process, and checked out (what a user types to get a new
#              version); peak RSS is the `VmHWM` the command logged.
#   floor:     the clone's `git lfs fetch` again through bench/null_agent.rs, an agent that only
#              copies the object from a local file: git-lfs's own cost for any custom agent
#              (batch call, agent start, re-hashing with SHA-256, move), which no agent beats.
# Each upload starts with only its input in the page cache (as root: clean pages dropped, then
# the input read once) and each download with only its server's store (the floor's: its input)
# and after `sync`; every timed step, on both sides, starts right after
# memory of the data's size was touched and freed (prime_memory in bench/lib.sh); after each
# upload the server's background SHA-256 check is waited for (not timed). Prints the whole
# commands' ratios first (reference / git-xet; above 1: git-xet is faster), then times,
# throughputs (MB = 10^6 bytes/s) and peak RSS, then the agents' own requests as a breakdown
# (with several files: the longest request for one object). Client and servers share the
# machine. This is a measurement, not a test; everything is removed afterwards.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-512}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_hf_python
use_recent_git_lfs

build_release

make_work push-bench
# The file exists about nine times at once (input, work tree, two LFS object stores, the clone's
# checkout, hf_xet's download, two server stores): check the space first.
avail_mib=$(df --output=avail -B1M "$work" | tail -1 | tr -d ' ')
if (( avail_mib < 9 * size_mib )); then
    echo "bench: $work has ${avail_mib} MiB free; ${size_mib} MiB needs about $(( 9 * size_mib )) MiB" >&2
    exit 2
fi

case "${GIT_XET_BENCH_DATA:-unique}" in
    unique) data=unique; write_unique "$work/input.bin" "$size_mib" ;;
    mixed) data=mixed; write_mixed "$work/input.bin" "$size_mib" ;;
    *) echo "bench: GIT_XET_BENCH_DATA is unique or mixed" >&2; exit 2 ;;
esac
size=$(stat -c %s "$work/input.bin")
nfiles="${GIT_XET_BENCH_FILES:-1}"
if ! [[ "$nfiles" =~ ^[1-9][0-9]*$ ]] || (( nfiles > 64 )); then
    echo "bench: GIT_XET_BENCH_FILES is a number of files from 1 to 64" >&2
    exit 2
fi
# The inputs: the file itself, or its cut into nfiles parts (part-00.bin, ...), each committed
# as model-NN.bin.
inputs=("$work/input.bin")
names=(model.bin)
if (( nfiles > 1 )); then
    (cd "$work" && split -n "$nfiles" -d -a 2 --additional-suffix=.bin input.bin part-)
    rm "$work/input.bin"
    inputs=(); names=()
    for f in "$work"/part-*.bin; do
        inputs+=("$f")
        names+=("model-$(basename "$f" .bin | cut -d- -f2).bin")
    done
fi
rounds="${GIT_XET_BENCH_RUNS:-3}"
bin_dir="$(dirname "$bin")"
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$bin_dir:$PATH"
now() { date +%s.%N; }
# Each upload starts from the same state: when this runs as root, clean page-cache pages are
# dropped first (a full page cache made the second upload pay for reclaim), then the input is
# read once, so that both sides start with it, and only it, in the page cache.
warm() {
    sync
    if [[ -w /proc/sys/vm/drop_caches ]]; then echo 1 > /proc/sys/vm/drop_caches; fi
    cat "$@" > /dev/null
}
# Each download starts the same way on both sides: clean page-cache pages dropped (as root), then
# the server's store read once, so that the server's bytes, and only they, are in the page cache
# (else a step late in the round met a page cache filled by the steps before it, where hf_xet's
# download, early in the round, did not).
warm_store() { # server name (a1, b1, …)
    local files=()
    mapfile -d '' files < <(find "$work/$1-store" -type f -print0)
    warm "${files[@]}"
}
# Right before each timed step, on both sides: pages for what the step writes that the machine
# has just used (prime_memory in bench/lib.sh explains why): the data's size and 256 MiB.
prime() { prime_memory $(( size_mib + 256 )); }

hf() { # mode cache-dir url -> prints "seconds peak_kib"
    HF_HOME="$work/$2" HF_XET_CACHE="$work/$2/xet" HF_XET_TELEMETRY_ENABLED=false \
        "$python" - "$1" "$3" "$token" "$work" "${inputs[@]}" <<'PY'
import json, os, resource, sys, time
mode, url, token, work = sys.argv[1:5]
inputs = sys.argv[5:]
import hf_xet
tok = (token, int(time.time()) + 3600)
if mode == "up":
    t = time.perf_counter()
    infos = hf_xet.upload_files(inputs, url, tok, None, None, "model")
    dt = time.perf_counter() - t
    with open(os.path.join(work, "hf.json"), "w") as f:
        json.dump([{"hash": i.hash, "size": i.file_size} for i in infos], f)
else:
    infos = json.load(open(os.path.join(work, "hf.json")))
    wanted = [hf_xet.PyXetDownloadInfo(os.path.join(work, "hf-out-%d.bin" % n), i["hash"], i["size"])
              for n, i in enumerate(infos)]
    t = time.perf_counter()
    hf_xet.download_files(wanted, url, tok, None, None)
    dt = time.perf_counter() - t
print(f"{dt:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
PY
}

# round N: one round of both sides; appends its figures to the arrays below.
hf_up=(); hf_up_rss=(); hf_down=(); hf_down_rss=(); floor=()
# bench/null_agent.rs, for the custom-agent floor of `git lfs fetch` (left out without rustc).
floor_agent="$work/null_agent"
if ! rustc -O --edition 2021 -o "$floor_agent" "$root/bench/null_agent.rs"; then
    echo "bench: cannot build bench/null_agent.rs (is rustc installed?); no floor row" >&2
    floor_agent=""
fi
push=(); push_rss=(); push_agent=(); fetch=(); fetch_rss=(); fetch_agent=(); checkout=()
pull=(); pull_rss=()
round() {
    local r="$1" t0 t1 a b
    # --- the reference client ---
    start_server "a$r"
    local url_a="$server_url"
    echo "bench: round $r: hf_xet against $url_a" >&2
    warm "${inputs[@]}"
    sync; prime; read -r a b < <(hf up "hf-up-$r" "$url_a"); hf_up+=("$a"); hf_up_rss+=("$b")
    settle_server "$url_a"
    warm_store "a$r"
    sync; prime; read -r a b < <(hf down "hf-down-$r" "$url_a"); hf_down+=("$a"); hf_down_rss+=("$b")
    local i
    for i in "${!inputs[@]}"; do
        cmp -s "${inputs[$i]}" "$work/hf-out-$i.bin" || { echo "bench: hf_xet round trip differs" >&2; exit 1; }
    done
    rm -rf "$work"/hf-out-*.bin "$work/hf-up-$r" "$work/hf-down-$r"
    # --- git-xet through git and git-lfs ---
    start_server "b$r"
    local url_b="$server_url"
    echo "bench: round $r: git-xet against $url_b" >&2
    local home="$work/home-$r"
    export HOME="$home" XDG_CONFIG_HOME="$home/.config" GIT_XET_CACHE_DIR="$home/xet-cache" \
        GIT_XET_LOG="$work/agent-$r.log"
    mkdir -p "$HOME"
    git config --global user.name bench
    git config --global user.email bench@example.com
    git config --global init.defaultBranch main
    git config --global credential.helper "!f() { test \"\$1\" = get && echo username=git && echo password=$token; }; f"
    git lfs install --skip-repo >/dev/null
    git xet install --global >/dev/null
    git init -q --bare "$work/remote-$r.git"
    git init -q "$work/repo-$r"
    cd "$work/repo-$r"
    git lfs track '*.bin' >/dev/null
    printf '[lfs]\n\turl = %s\n' "$url_b/bench/repo.git/info/lfs" > .lfsconfig
    git add . && git commit -q -m setup
    git remote add origin "../remote-$r.git"
    git push -q origin HEAD:main
    # The pull side's clone: before the data, on its first commit.
    (cd "$work" && GIT_LFS_SKIP_SMUDGE=1 git clone -q "remote-$r.git" "pull-$r")
    for i in "${!inputs[@]}"; do cp "${inputs[$i]}" "${names[$i]}"; done
    git add . && git commit -q -m bench
    local oids=() objects=() oid
    for i in "${!inputs[@]}"; do
        oid=$(sed -n 's/^oid sha256://p' <(git cat-file -p "HEAD:${names[$i]}"))
        oids+=("$oid")
        objects+=(".git/lfs/objects/${oid:0:2}/${oid:2:2}/$oid")
    done
    warm "${objects[@]}"
    sync; prime; t0=$(now); git push -q origin main; t1=$(now)
    push+=("$(echo "$t1 - $t0" | bc)")
    settle_server "$url_b"
    push_rss+=("$(peak_rss "$GIT_XET_LOG")")
    push_agent+=("$(agent_secs "$GIT_XET_LOG")")
    : > "$GIT_XET_LOG"
    cd "$work"
    GIT_LFS_SKIP_SMUDGE=1 git clone -q "remote-$r.git" "clone-$r"
    cd "clone-$r"
    warm_store "b$r"
    sync; prime; t0=$(now); git lfs fetch >/dev/null; t1=$(now)
    fetch+=("$(echo "$t1 - $t0" | bc)")
    prime; t0=$(now); git lfs checkout >/dev/null 2>&1; t1=$(now)
    checkout+=("$(echo "$t1 - $t0" | bc)")
    fetch_rss+=("$(peak_rss "$GIT_XET_LOG")")
    fetch_agent+=("$(agent_secs "$GIT_XET_LOG")")
    for i in "${!inputs[@]}"; do
        cmp -s "${inputs[$i]}" "${names[$i]}" || { echo "bench: git round trip differs" >&2; exit 1; }
    done
    # git xet pull of the new files into the clone made before the push.
    cd "$work/pull-$r"
    warm_store "b$r"
    sync; prime; t0=$(now)
    GIT_XET_LOG="$work/pull-$r.log" git xet pull -- -q origin main
    t1=$(now)
    pull+=("$(echo "$t1 - $t0" | bc)")
    pull_rss+=("$(peak_rss "$work/pull-$r.log")")
    for i in "${!inputs[@]}"; do
        cmp -s "${inputs[$i]}" "${names[$i]}" || { echo "bench: git xet pull differs" >&2; exit 1; }
    done
    if [[ -n "$(git status --porcelain)" ]]; then echo "bench: git xet pull left changes" >&2; exit 1; fi
    cd "$work/clone-$r"
    # The floor: the same fetch through an agent that only copies the object from a local file.
    if [[ -n "$floor_agent" ]]; then
        mkdir -p "$work/by-oid"
        for i in "${!inputs[@]}"; do ln -f "${inputs[$i]}" "$work/by-oid/${oids[$i]}"; done
        rm -rf .git/lfs/objects
        warm "${inputs[@]}"
        sync; prime; t0=$(now)
        git -c lfs.customtransfer.xet.path="$floor_agent" \
            -c lfs.customtransfer.xet.args="$work/by-oid" lfs fetch >/dev/null
        t1=$(now)
        floor+=("$(echo "$t1 - $t0" | bc)")
    fi
    cd "$work"
    stop_servers
    rm -rf "$work/a$r-store" "$work/b$r-store" "$work/repo-$r" "$work/clone-$r" \
        "$work/remote-$r.git" "$work/pull-$r" "$home"
}
# The agents' own time: the longest request ("done … secs=") of any agent process.
agent_secs() { grep -o ' done oid=.* secs=[0-9.]*' "$1" | sed 's/.*secs=//' | sort -n | tail -1; }
# The largest peak RSS (KiB) an agent process logged at exit.
peak_rss() { grep -o 'peak_rss_kib=[0-9]*' "$1" | cut -d= -f2 | sort -n | tail -1; }

for r in $(seq 1 "$rounds"); do round "$r"; done

m() { median "$@"; }
mbs() { echo "scale=1; $size / $1 / 1000000" | bc; }
mib() { echo "scale=1; ${1:-0} / 1024" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc; }
echo
echo "data: $size bytes of $data data in $nfiles file(s); $lfs_version; medians of $rounds rounds"
echo "git push       vs hf_xet.upload_files:   $(ratio "$(m "${hf_up[@]}")" "$(m "${push[@]}")")x"
echo "git lfs fetch  vs hf_xet.download_files: $(ratio "$(m "${hf_down[@]}")" "$(m "${fetch[@]}")")x"
echo "git xet pull   vs hf_xet.download_files: $(ratio "$(m "${hf_down[@]}")" "$(m "${pull[@]}")")x"
if [[ -n "$floor_agent" ]]; then
    echo "  (the most any custom agent could reach here: $(ratio "$(m "${hf_down[@]}")" "$(m "${floor[@]}")")x, see the floor row)"
fi
echo
printf '%-30s %9s %10s %14s   %s\n' "" "seconds" "MB/s" "peak RSS MiB" "rounds (s)"
row() { # label times-var rss-var
    local -n times="$2"
    local t; t=$(m "${times[@]}")
    local rss=""
    if [[ -n "${3:-}" ]]; then local -n rs="$3"; rss=$(mib "$(m "${rs[@]}")"); fi
    printf '%-30s %9.2f %10s %14s   %s\n' "$1" "$t" "$(mbs "$t")" "$rss" "${times[*]}"
}
row "hf_xet upload_files" hf_up hf_up_rss
row "git push (git-xet agent)" push push_rss
row "hf_xet download_files" hf_down hf_down_rss
row "git lfs fetch (git-xet)" fetch fetch_rss
row "git lfs checkout (copy)" checkout
row "git xet pull (new version)" pull pull_rss
if [[ -n "$floor_agent" ]]; then
    row "git lfs fetch, floor" floor
    echo "  the floor is git-lfs fetching through an agent that only copies the file from a local"
    echo "  disk (bench/null_agent.rs): its batch call, agent start, re-hashing with SHA-256 and"
    echo "  move. No custom agent fetches faster; against hf_xet it would be"
    echo "  $(ratio "$(m "${hf_down[@]}")" "$(m "${floor[@]}")")x, and git-xet's fetch takes $(ratio "$(m "${fetch[@]}")" "$(m "${floor[@]}")")x the floor's time."
fi
echo
echo "breakdown: the agents' own requests"
row "  agent's upload request" push_agent
row "  agent's download request" fetch_agent
echo "  agent-only ratios: upload $(ratio "$(m "${hf_up[@]}")" "$(m "${push_agent[@]}")")x, download $(ratio "$(m "${hf_down[@]}")" "$(m "${fetch_agent[@]}")")x"
echo "(git lfs fetch includes git-lfs's own work: the batch call, starting the agents, and"
echo " re-hashing every downloaded object with SHA-256 before moving it into place)"
