#!/usr/bin/env bash
# Benchmark: `git push` / `git lfs fetch` through the git-xet agent against the reference
# client's `hf_xet.upload_files` / `download_files`, each against its own fresh `git xet serve`.
#
# Usage: bench/push_pull.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the test file in MiB (default 512)
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` installed (default: .venv/bin/python in the crate
#                        root, then /tmp/hfvenv/bin/python)
#
# Steps: build the release binary; write one mixed file (a quarter each of random bytes, text
# lines, zeros and a repeated 64 KiB block, in 8 MiB stripes); start two release servers on
# 127.0.0.1:0, each with an empty store.
#   reference: hf_xet uploads the file to server A (fresh client cache) and downloads it by Xet
#              hash (fresh cache again), each in its own Python process; wall time and the
#              process's peak RSS (getrusage) are measured.
#   git-xet:   in a private HOME, `git xet install` (negotiated mode: the LFS server of server B
#              chooses xet), the file is committed (not timed: hashing by `git add` is git-lfs's),
#              `git push` is timed; then a clone with GIT_LFS_SKIP_SMUDGE=1 and a timed
#              `git lfs fetch` (download into .git/lfs/objects, like hf_xet's download into a
#              file); `git lfs checkout` is timed separately. Peak RSS is the largest `VmHWM` an
#              agent process logged at exit (git-lfs runs up to 8).
# Prints times, throughputs (MB = 10^6 bytes/s), peak RSS, and the ratios reference / git-xet
# (above 1: git-xet is faster). Client and servers share the machine, so these measure the
# pairs. This is a measurement, not a test; everything is removed afterwards.
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

write_mixed "$work/input.bin" "$size_mib"
size=$(stat -c %s "$work/input.bin")

# --- the reference client -------------------------------------------------------------------
start_server a
url_a="$server_url"
echo "bench: hf_xet against $url_a" >&2
hf() { # mode cache-dir -> prints "seconds peak_kib [hash]"
    HF_HOME="$work/$2" HF_XET_CACHE="$work/$2/xet" HF_XET_TELEMETRY_ENABLED=false \
        "$python" - "$1" "$url_a" "$token" "$work" <<'PY'
import json, os, resource, sys, time
mode, url, token, work = sys.argv[1:5]
import hf_xet
tok = (token, int(time.time()) + 3600)
if mode == "up":
    t = time.perf_counter()
    info = hf_xet.upload_files([os.path.join(work, "input.bin")], url, tok, None, None, "model")[0]
    dt = time.perf_counter() - t
    with open(os.path.join(work, "hf.json"), "w") as f:
        json.dump({"hash": info.hash, "size": info.file_size}, f)
else:
    info = json.load(open(os.path.join(work, "hf.json")))
    t = time.perf_counter()
    hf_xet.download_files([hf_xet.PyXetDownloadInfo(os.path.join(work, "hf-out.bin"),
                                                    info["hash"], info["size"])], url, tok, None, None)
    dt = time.perf_counter() - t
print(f"{dt:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
PY
}
# `sync` before each timed step: dirty pages of the previous step (the file just written, the
# server's new xorbs) must not be flushed on the next step's time, for either side. After each
# upload, `settle_server` waits until the server has checked the upload's SHA-256 claim (it
# hashes large files in the background; on a server of its own that costs the client nothing),
# for both sides alike.
# Each upload starts from the same state: when this runs as root, clean page-cache pages are
# dropped first (the steps before the git side wrote three times more than those before
# hf_xet's, and a full page cache made the second upload pay for reclaim), then the input is
# read once, so that both sides start with it, and only it, in the page cache.
warm() {
    sync
    if [[ -w /proc/sys/vm/drop_caches ]]; then echo 1 > /proc/sys/vm/drop_caches; fi
    cat "$1" > /dev/null
}
warm "$work/input.bin"
sync; read -r hf_up hf_up_rss < <(hf up cache-up)
settle_server "$url_a"
sync; read -r hf_down hf_down_rss < <(hf down cache-down)
cmp -s "$work/input.bin" "$work/hf-out.bin" || { echo "bench: hf_xet round trip differs" >&2; exit 1; }

# --- git-xet through git and git-lfs --------------------------------------------------------
start_server b
url_b="$server_url"
echo "bench: git-xet against $url_b" >&2
bin_dir="$(dirname "$bin")"
export HOME="$work/home" XDG_CONFIG_HOME="$work/home/.config" GIT_CONFIG_NOSYSTEM=1 \
    GIT_TERMINAL_PROMPT=0 GIT_XET_CACHE_DIR="$work/xet-cache" GIT_XET_LOG="$work/agent.log" \
    PATH="$bin_dir:$PATH"
mkdir -p "$HOME"
git config --global user.name bench
git config --global user.email bench@example.com
git config --global init.defaultBranch main
git config --global credential.helper "!f() { test \"\$1\" = get && echo username=git && echo password=$token; }; f"
git lfs install --skip-repo >/dev/null
git xet install --global >/dev/null
lfs_url="$url_b/bench/repo.git/info/lfs"
git init -q --bare "$work/remote.git"
git init -q "$work/repo"
cd "$work/repo"
git lfs track '*.bin' >/dev/null
printf '[lfs]\n\turl = %s\n' "$lfs_url" > .lfsconfig
cp "$work/input.bin" model.bin
git add . && git commit -q -m bench
git remote add origin ../remote.git
now() { date +%s.%N; }
oid=$(sed -n 's/^oid sha256://p' <(git cat-file -p HEAD:model.bin))
warm ".git/lfs/objects/${oid:0:2}/${oid:2:2}/$oid"
sync; t0=$(now); git push -q origin main; t1=$(now)
push_s=$(echo "$t1 - $t0" | bc)
settle_server "$url_b"
push_rss=$(grep -o 'peak_rss_kib=[0-9]*' "$work/agent.log" | cut -d= -f2 | sort -n | tail -1)
# The agents' own time: the longest request ("done … secs=") of any agent process.
agent_secs() { grep -o ' done oid=.* secs=[0-9.]*' "$work/agent.log" | sed 's/.*secs=//' | sort -n | tail -1; }
push_agent_s=$(agent_secs)
: > "$work/agent.log"
cd "$work"
GIT_LFS_SKIP_SMUDGE=1 git clone -q remote.git clone
cd clone
sync; t0=$(now); git lfs fetch >/dev/null; t1=$(now)
fetch_s=$(echo "$t1 - $t0" | bc)
t0=$(now); git lfs checkout >/dev/null 2>&1; t1=$(now)
checkout_s=$(echo "$t1 - $t0" | bc)
fetch_rss=$(grep -o 'peak_rss_kib=[0-9]*' "$work/agent.log" | cut -d= -f2 | sort -n | tail -1)
fetch_agent_s=$(agent_secs)
cmp -s "$work/input.bin" model.bin || { echo "bench: git round trip differs" >&2; exit 1; }
grep -q ': uploaded oid' "$work/agent.log" 2>/dev/null || true

mbs() { echo "scale=1; $size / $1 / 1000000" | bc; }
mib() { echo "scale=1; ${1:-0} / 1024" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc; }
echo
echo "file: $size bytes of mixed data; $lfs_version"
printf '%-28s %9s %10s %14s\n' "" "seconds" "MB/s" "peak RSS MiB"
printf '%-28s %9.2f %10s %14s\n' "hf_xet upload_files" "$hf_up" "$(mbs "$hf_up")" "$(mib "$hf_up_rss")"
printf '%-28s %9.2f %10s %14s\n' "git push (git-xet agent)" "$push_s" "$(mbs "$push_s")" "$(mib "$push_rss")"
printf '%-28s %9.2f %10s %14s\n' "hf_xet download_files" "$hf_down" "$(mbs "$hf_down")" "$(mib "$hf_down_rss")"
printf '%-28s %9.2f %10s %14s\n' "git lfs fetch (git-xet)" "$fetch_s" "$(mbs "$fetch_s")" "$(mib "$fetch_rss")"
printf '%-28s %9.2f\n' "git lfs checkout (copy)" "$checkout_s"
printf '%-28s %9.2f %10s\n' "  agent's upload request" "$push_agent_s" "$(mbs "$push_agent_s")"
printf '%-28s %9.2f %10s\n' "  agent's download request" "$fetch_agent_s" "$(mbs "$fetch_agent_s")"
echo
echo "push ratio  (hf_xet upload / git push):        $(ratio "$hf_up" "$push_s")x"
echo "pull ratio  (hf_xet download / git lfs fetch): $(ratio "$hf_down" "$fetch_s")x"
echo "agent-only  upload $(ratio "$hf_up" "$push_agent_s")x, download $(ratio "$hf_down" "$fetch_agent_s")x"
echo "(git lfs fetch includes git-lfs's own work: the batch call, starting the agents, and"
echo " re-hashing every downloaded object with SHA-256 before moving it into place)"
