#!/usr/bin/env bash
# Benchmark: the push of a small edit of a large file, `git push` through the git-xet agent
# against the reference client's `hf_xet.upload_files` of the new version with a warm cache.
#
# Usage: bench/small_edit.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the file in MiB (default 512)
#   EDIT_MIB             how much of it the edit changes, in MiB (default 1): random bytes in
#                        the middle of the file, overwritten in place
#   GIT_XET_BENCH_RUNS   rounds (default 3); every figure printed is the median of the rounds
#   GIT_XET_BENCH_BIN    a git-xet binary to use instead of building the release one (to
#                        compare two builds on the same day)
#   GIT_XET_BENCH_HF_GIT_XET  Hugging Face's git-xet binary (built from huggingface/xet-core with
#                        `cargo build --release -p git_xet`): then each round also times its
#                        `git push` of v1, the same way as ours, and the ratio is printed
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` installed (default: .venv/bin/python in the crate
#                        root, then /tmp/hfvenv/bin/python)
#
# The data: v0 is SIZE_MIB of unique data (bench/lib.sh), v1 is v0 with EDIT_MIB of random bytes
# written over its middle (the same bytes every round). Each round, each side against its own
# new release `git xet serve` (empty store):
#   reference: hf_xet uploads v0 (not timed), then v1 with the same cache directory (timed):
#              the cache holds what the upload of v0 left (its shard), as on a machine that
#              pushed the earlier version; each upload in its own Python process, the time being
#              that of the `upload_files` call.
#   git-xet:   in a private HOME, `git xet install` (negotiated mode against server B's LFS
#              server), v0 committed and pushed (not timed), then v1 committed (not timed:
#              git-lfs hashes it in `git add`) and `git push` timed: the whole command (git,
#              git-lfs's pre-push and batch call, the agent). The agent's own request is read
#              from its log, and so is how long it spent finding the earlier version of the file
#              (its chunk list and where its chunks are stored).
# Before each timed push or upload: `sync`, clean page-cache pages dropped (as root), the input
# read once, and memory of the file's size primed (prime_memory in bench/lib.sh); after each
# upload the server's background SHA-256 check is waited for (not timed). Prints the ratio
# hf_xet / git-xet (above 1: git-xet is faster) for the whole push and for the agent's request
# alone, then each round's seconds. Client and server share the machine; on a shared 2-core
# machine single rounds vary by tens of percent: compare the medians. This is a measurement, not
# a test; everything is removed afterwards.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-512}"
edit_mib="${EDIT_MIB:-1}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_hf_python
use_recent_git_lfs
if [[ -n "${GIT_XET_BENCH_BIN:-}" ]]; then
    bin="$GIT_XET_BENCH_BIN"
else
    build_release
fi
[[ -x "$bin" ]] || { echo "bench: $bin is missing" >&2; exit 2; }

make_work small-edit
# v0 and v1, the two servers' stores, the work tree and the LFS object store hold the file
# about eight times at once.
avail_mib=$(df --output=avail -B1M "$work" | tail -1 | tr -d ' ')
if (( avail_mib < 8 * size_mib )); then
    echo "bench: $work has ${avail_mib} MiB free; ${size_mib} MiB needs about $(( 8 * size_mib )) MiB" >&2
    exit 2
fi
write_unique "$work/v0.bin" "$size_mib"
cp "$work/v0.bin" "$work/v1.bin"
"$python" - "$work/v1.bin" "$edit_mib" <<'PY'
import os, random, sys
path, n = sys.argv[1], int(sys.argv[2]) << 20
size = os.path.getsize(path)
with open(path, "r+b") as f:
    f.seek(size // 2)
    f.write(random.Random(20261201).randbytes(n))
PY
size=$(stat -c %s "$work/v1.bin")
rounds="${GIT_XET_BENCH_RUNS:-3}"
bin_dir="$(dirname "$bin")"
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$bin_dir:$PATH"
now() { date +%s.%N; }
warm() {
    sync
    if [[ -w /proc/sys/vm/drop_caches ]]; then echo 1 > /proc/sys/vm/drop_caches; fi
    cat "$@" > /dev/null
}
prime() { prime_memory $(( size_mib + 256 )); }

hf_upload() { # cache-dir url file -> prints the seconds of the upload_files call
    HF_HOME="$work/$1" HF_XET_CACHE="$work/$1/xet" HF_XET_TELEMETRY_ENABLED=false \
        "$python" - "$2" "$token" "$3" <<'PY'
import sys, time
url, token, path = sys.argv[1:4]
import hf_xet
tok = (token, int(time.time()) + 3600)
t = time.perf_counter()
hf_xet.upload_files([path], url, tok, None, None, "model")
print(f"{time.perf_counter() - t:.3f}")
PY
}

# The agent's longest request ("done … secs="), and the milliseconds it spent on the earlier
# versions of the file (the sum of "earlier versions … millis=" lines; 0 when it logs none).
agent_secs() { grep -o ' done oid=.* secs=[0-9.]*' "$1" | sed 's/.*secs=//' | sort -n | tail -1; }
prior_millis() {
    { grep -o 'earlier versions looked up.* millis=[0-9]*' "$1" || true; } | sed 's/.*millis=//' \
        | awk '{s += $1} END {print s + 0}'
}

hf_up=(); push=(); agent=(); prior=(); hf_push=()
# Hugging Face's git-xet (built from huggingface/xet-core: `cargo build --release -p git_xet`).
hf_bin="${GIT_XET_BENCH_HF_GIT_XET:-}"
if [[ -n "$hf_bin" && ! -x "$hf_bin" ]]; then
    echo "bench: GIT_XET_BENCH_HF_GIT_XET=$hf_bin is not an executable" >&2; exit 2
fi
round() {
    local r="$1" t0 t1
    # --- the reference client ---
    start_server "a$r"
    local url_a="$server_url"
    echo "bench: round $r: hf_xet against $url_a" >&2
    hf_upload "hf-cache-$r" "$url_a" "$work/v0.bin" >/dev/null
    settle_server "$url_a"
    warm "$work/v1.bin"
    prime; hf_up+=("$(hf_upload "hf-cache-$r" "$url_a" "$work/v1.bin")")
    settle_server "$url_a"
    rm -rf "$work/hf-cache-$r"
    # --- git-xet through git and git-lfs ---
    git_push "$r" b "$bin"
    push+=("$pushed_secs")
    agent+=("$(agent_secs "$work/agent-b$r.log")")
    prior+=("$(prior_millis "$work/agent-b$r.log")")
    # --- Hugging Face's git-xet, the same way ---
    if [[ -n "$hf_bin" ]]; then
        git_push "$r" c "$hf_bin"
        hf_push+=("$pushed_secs")
    fi
    cd "$work"
    stop_servers
    rm -rf "$work/a$r-store" "$work/b$r-store" "$work/c$r-store"
}

# git_push ROUND SERVER-NAME AGENT-BINARY: in a private HOME with AGENT-BINARY installed as the
# `xet` agent (`install --global`), against a new server: v0 pushed, v1 committed, then `git
# push` of v1 timed: its seconds in $pushed_secs. (Not run in a subshell: the servers it starts
# are stopped by stop_servers.)
git_push() {
    local r="$1" name="$2" agent_bin="$3" t0 t1
    start_server "$name$r"
    local url="$server_url"
    echo "bench: round $r: $("$agent_bin" --version 2>/dev/null | head -1) against $url" >&2
    local home="$work/home-$name$r"
    use_home "$home"
    export GIT_XET_LOG="$work/agent-$name$r.log"
    # Ours takes --global; Hugging Face's installs globally by default and refuses it.
    if [[ "$agent_bin" == "$bin" ]]; then
        "$agent_bin" install --global >/dev/null
    else
        "$agent_bin" install >/dev/null
    fi
    git init -q --bare "$work/remote-$name$r.git"
    git init -q "$work/repo-$name$r"
    cd "$work/repo-$name$r"
    git lfs track '*.bin' >/dev/null
    printf '[lfs]\n\turl = %s\n' "$url/bench/repo.git/info/lfs" > .lfsconfig
    cp "$work/v0.bin" model.bin
    git add . && git commit -q -m v0
    git remote add origin "../remote-$name$r.git"
    git push -q origin main >&2
    settle_server "$url"
    cp "$work/v1.bin" model.bin
    git commit -q -am "edit of $edit_mib MiB"
    local oid
    oid=$(sed -n 's/^oid sha256://p' <(git cat-file -p HEAD:model.bin))
    : > "$GIT_XET_LOG"
    warm ".git/lfs/objects/${oid:0:2}/${oid:2:2}/$oid"
    prime; t0=$(now); git push -q origin main >&2; t1=$(now)
    settle_server "$url"
    cd "$work"
    rm -rf "$work/repo-$name$r" "$work/remote-$name$r.git" "$home"
    pushed_secs="$(echo "$t1 - $t0" | bc)"
}

for r in $(seq 1 "$rounds"); do round "$r"; done

m() { median "$@"; }
ratio() { echo "scale=2; $1 / $2" | bc; }
git_version="$(git --version | cut -d' ' -f3)"
echo
echo "a $edit_mib MiB edit of $size bytes of unique data; $("$bin" --version 2>/dev/null | head -1);"
echo "$lfs_version, git $git_version, hf_xet $("$python" -c 'import importlib.metadata as m; print(m.version("hf-xet"))'); medians of $rounds rounds"
echo "git push (agent) vs hf_xet.upload_files (warm cache): $(ratio "$(m "${hf_up[@]}")" "$(m "${push[@]}")")x"
echo "  the agent's request alone:                        $(ratio "$(m "${hf_up[@]}")" "$(m "${agent[@]}")")x"
echo
printf '%-44s %9s   %s\n' "" "seconds" "rounds (s)"
row() { # label times-var
    local -n times="$2"
    printf '%-44s %9.3f   %s\n' "$1" "$(m "${times[@]}")" "${times[*]}"
}
if [[ -n "$hf_bin" ]]; then
    echo "git push (agent) vs git push (Hugging Face's git-xet): $(ratio "$(m "${hf_push[@]}")" "$(m "${push[@]}")")x"
    echo
fi
row "hf_xet upload_files of v1, warm cache" hf_up
if [[ -n "$hf_bin" ]]; then row "git push of v1 (Hugging Face's git-xet)" hf_push; fi
row "git push of v1 (git-xet agent)" push
row "  the agent's upload request" agent
printf '%-44s %9.3f   %s\n' "    of which finding the earlier version" \
    "$(echo "scale=3; $(m "${prior[@]}") / 1000" | bc)" "$(printf '%s ms ' "${prior[@]}")"
