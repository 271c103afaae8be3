# shellcheck shell=bash disable=SC2154,SC2034
# Shared by the benchmark scripts (sourced, not run). Expects $root, the crate root.

# Sets $python to a Python with hf_xet: $GIT_XET_HF_PYTHON, then .venv/bin/python, then
# /tmp/hfvenv/bin/python; exits 2 if there is none.
find_hf_python() {
    python="${GIT_XET_HF_PYTHON:-}"
    if [[ -z "$python" ]]; then
        for candidate in "$root/.venv/bin/python" /tmp/hfvenv/bin/python; do
            if [[ -x "$candidate" ]]; then python="$candidate"; break; fi
        done
    fi
    if [[ -z "$python" ]] || ! "$python" -c 'import hf_xet' 2>/dev/null; then
        echo "bench: no Python with hf_xet found; set GIT_XET_HF_PYTHON" >&2
        exit 2
    fi
}

# Builds the release binary and sets $bin to it.
# GIT_XET_BENCH_BIN names a binary to use instead (to compare a build before and after a change),
# a file called git-xet.
build_release() {
    if [[ -n "${GIT_XET_BENCH_BIN:-}" ]]; then
        bin="$GIT_XET_BENCH_BIN"
        # git finds `git xet` as a file named git-xet on PATH (push_setup puts its directory
        # first).
        if [[ "$(basename "$bin")" != git-xet ]]; then
            echo "bench: GIT_XET_BENCH_BIN must name a file called git-xet (e.g. /tmp/before/git-xet)" >&2
            exit 2
        fi
        echo "bench: using $bin" >&2
        return
    fi
    echo "bench: building the release binary" >&2
    (cd "$root" && cargo build --release --quiet)
    bin="$root/target/release/git-xet"
}

# write_mixed PATH SIZE_MIB: a quarter each of random bytes, text lines, zeros and a repeated
# 64 KiB block, in 8 MiB stripes (deterministic).
write_mixed() {
    echo "bench: writing $2 MiB of mixed data" >&2
    "$python" - "$1" "$2" <<'PY'
import random, sys
path, size = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
stripe = 8 * 1024 * 1024
rng = random.Random(20260722)
block = rng.randbytes(65536)
text = b"".join(b"line %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(200000))
with open(path, "wb") as f:
    written, i = 0, 0
    while written < size:
        n = min(stripe, size - written)
        kind = i % 4
        if kind == 0:
            data = rng.randbytes(n)
        elif kind == 1:
            data = (text * (n // len(text) + 1))[:n]
        elif kind == 2:
            data = bytes(n)
        else:
            data = (block * (n // len(block) + 1))[:n]
        f.write(data)
        written += n
        i += 1
PY
}

# write_unique PATH SIZE_MIB: data no deduplicating client gets for free: in 8 MiB stripes,
# alternately random bytes and distinct text lines (each line numbered, with random words), so
# that no chunk repeats and half of it compresses (deterministic).
write_unique() {
    echo "bench: writing $2 MiB of unique data" >&2
    "$python" - "$1" "$2" <<'PY'
import random, sys
path, size = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
stripe = 8 * 1024 * 1024
rng = random.Random(20261126)
words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(5000)]
line_no = 0
with open(path, "wb") as f:
    written, i = 0, 0
    while written < size:
        n = min(stripe, size - written)
        if i % 2 == 0:
            data = rng.randbytes(n)
        else:
            parts, got = [], 0
            while got < n:
                line = b"%d: %s\n" % (line_no, b" ".join(rng.choices(words, k=8)))
                line_no += 1
                parts.append(line)
                got += len(line)
            data = b"".join(parts)[:n]
        f.write(data)
        written += n
        i += 1
PY
}

# median N...: the median of the numbers (the lower middle one of an even count).
median() {
    printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

# stop_servers: stops every server start_server started (their stores stay).
stop_servers() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    pids=()
}

# Puts git-lfs 3.6 or newer first on PATH: $GIT_XET_BENCH_LFS (a directory holding `git-lfs`),
# then .bench/git-lfs/usr/bin (unpacked by bench/get-git-lfs.sh), then whatever is on PATH.
# Warns when the one used is older than 3.6 (3.3's SHA-256 is four times slower, and not what
# most users run).
use_recent_git_lfs() {
    local dir
    for dir in "${GIT_XET_BENCH_LFS:-}" "$root/.bench/git-lfs/usr/bin"; do
        if [[ -n "$dir" && -x "$dir/git-lfs" ]]; then PATH="$dir:$PATH"; export PATH; break; fi
    done
    git lfs version >/dev/null 2>&1 || { echo "bench: git-lfs is not installed" >&2; exit 2; }
    local v
    v="$(git lfs version | sed -n 's|^git-lfs/\([0-9]*\.[0-9]*\).*|\1|p')"
    lfs_version="$(git lfs version | cut -d' ' -f1)"
    if [[ "$(printf '%s\n3.6\n' "$v" | sort -V | head -1)" != 3.6 ]]; then
        echo "bench: warning: $lfs_version is older than 3.6; run bench/get-git-lfs.sh" >&2
    fi
}

# make_work NAME: a temporary directory in $work, removed (with every server started by
# start_server) when the script exits; kept, with the servers' logs, when GIT_XET_BENCH_KEEP=1.
make_work() {
    wait_after_last_cleanup
    work="$(mktemp -d "${TMPDIR:-/tmp}/git-xet-$1.XXXXXX")"
    pids=()
    token="bench-token-$RANDOM$RANDOM$RANDOM"
    trap bench_cleanup EXIT
}
bench_cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    if [[ "${GIT_XET_BENCH_KEEP:-}" == 1 ]]; then
        echo "bench: kept $work" >&2
    else
        rm -rf "$work"
        touch "$cleaned_stamp" 2>/dev/null || true
    fi
}

# When the last benchmark removed its files. ext4 without a journal (this machine's) skips every
# inode deleted in the last 60 s (the kernel's RECENTCY_MIN; longer while the inode's table
# block is dirty) when it allocates a new one, reading its inode block to tell: a run started
# right after another one's cleanup pays for those deletes in every file it creates (1000
# files took 501 ms to create 35 s after 10 000 deletes, 111 ms after 65 s).
cleaned_stamp="${TMPDIR:-/tmp}/git-xet-bench.cleaned"
wait_after_last_cleanup() {
    [[ -f "$cleaned_stamp" ]] || return 0
    local age
    age=$(( $(date +%s) - $(stat -c %Y "$cleaned_stamp") ))
    if (( age >= 0 && age < 65 )); then
        echo "bench: waiting $(( 65 - age )) s after the last benchmark's cleanup (see bench/lib.sh)" >&2
        sleep $(( 65 - age ))
    fi
}

# cpu_seconds PID...: the CPU time (user + system, seconds) the processes PID... used so far.
cpu_seconds() {
    local p ticks=0 t
    for p in "$@"; do
        # Fields 14 and 15 of /proc/PID/stat (after the command's parenthesised name).
        t=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')
        ticks=$(( ticks + ${t:-0} ))
    done
    echo "scale=2; $ticks / $(getconf CLK_TCK)" | bc -l
}

# child_cpu_seconds PID: the CPU time (user + system, seconds) of the children that the shell
# PID has waited for, with theirs (fields 16 and 17 of /proc/PID/stat).
child_cpu_seconds() {
    local t
    t=$(sed 's/^.*) //' "/proc/$1/stat" | awk '{print $14 + $15}')
    echo "scale=2; $t / $(getconf CLK_TCK)" | bc -l
}

server_pids=()
declare -A server_pid_at=()
# start_server NAME [ARG...]: a release `git xet serve` (with ARGs) with an empty store in $work/NAME-store on
# 127.0.0.1:0 and the write token $token; sets $server_url (not in a subshell, so that the
# cleanup knows the server). Exits if it does not start.
start_server() {
    "$bin" serve --data "$work/$1-store" --listen 127.0.0.1:0 --token "$token" \
        --max-lifetime 3600 "${@:2}" > "$work/$1.out" 2> "$work/$1.log" &
    pids+=($!)
    server_pids+=($!)
    server_url=""
    local _
    for _ in $(seq 1 100); do
        server_url="$(sed -n 's/^listening on //p' "$work/$1.out")"
        [[ -n "$server_url" ]] && { server_pid_at[$server_url]=${pids[-1]}; return; }
        sleep 0.1
    done
    echo "bench: server $1 did not start" >&2
    cat "$work/$1.log" >&2
    exit 1
}

# use_home DIR: makes DIR the HOME of what follows (exported: HOME, XDG_CONFIG_HOME and
# GIT_XET_CACHE_DIR=DIR/xet-cache), with an identity, `main` as the default branch, a credential
# helper answering $token and git-lfs's filters.
use_home() {
    mkdir -p "$1"
    export HOME="$1" XDG_CONFIG_HOME="$1/.config" GIT_XET_CACHE_DIR="$1/xet-cache"
    git config --global user.name bench
    git config --global user.email bench@example.com
    git config --global init.defaultBranch main
    # git's automatic gc in the foreground: after a commit of thousands of files one in the
    # background packs objects while git-lfs's pre-push scan reads them, which then fails with
    # "missing object" (git's race with git-lfs; git-xet's own pre-push hook, installed with
    # --local, waits for such a gc, but `install --global` leaves git-lfs's hook).
    git config --global gc.autoDetach false
    git config --global credential.helper \
        "!f() { test \"\$1\" = get && echo username=git && echo password=$token; }; f"
    git lfs install --skip-repo >/dev/null
}

# settle_server URL: waits (at most two minutes) until the server at URL has checked every
# SHA-256 claim of the uploads so far (`unchecked_sha256_claims` of /health is 0). The server
# checks large files in the background after the upload is answered; on one machine that work
# would otherwise be timed as part of the next step. Prints the seconds waited to stderr.
settle_server() {
    local start waited claims
    start=$(date +%s.%N)
    for _ in $(seq 1 1200); do
        claims=$(curl -s "$1/health" | sed -n 's/.*"unchecked_sha256_claims":\([0-9]*\).*/\1/p')
        [[ "$claims" == 0 ]] && break
        sleep 0.1
    done
    waited=$(echo "$(date +%s.%N) - $start" | bc)
    echo "bench: the server checked the upload's SHA-256 claims ${waited}s after it answered" >&2
}

# prime_memory MIB: touches MIB MiB of anonymous memory in a short-lived process, so that the
# next step's new pages (page cache for the files it writes, its buffers) are ones the machine
# has just used. On a VM whose host takes back the guest's free pages (free page reporting),
# pages that have been free for a few seconds cost about a microsecond each again when first
# written: writing 2 GiB into the page cache took 0.53 s right after 2 GiB had been freed, 1.25 s
# three seconds later and 2.5 s ten seconds later (2026-11-27, this 2-core VM): a side that got
# such pages paid for the VM. Every side is primed the same way right before each timed step.
prime_memory() {
    "${python:-python3}" - "$1" 2>/dev/null <<'PY' || echo "bench: warning: could not prime $1 MiB of memory" >&2
import mmap, sys
n = int(sys.argv[1]) << 20
m = mmap.mmap(-1, n)
block = b"\x01" * (64 << 20)
for at in range(0, n, len(block)):
    part = min(len(block), n - at)
    m[at:at + part] = block[:part]
PY
}

# find_garage: sets $garage to the Garage binary ($GARAGE, else on PATH, else
# ~/.cargo/bin/garage); exits 2 if there is none.
find_garage() {
    garage="${GARAGE:-$(command -v garage || echo "${CARGO_HOME:-$HOME/.cargo}/bin/garage")}"
    if [[ ! -x "$garage" ]]; then
        echo "bench: Garage is not installed (cargo install garage --version 2.5.0 --locked)" >&2
        exit 2
    fi
}

free_port() { "${python:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_garage BUCKET...: Garage on 127.0.0.1 in $work/garage (stopped with the servers), set
# up through its CLI, with the buckets given and a key for them in the exported AWS_* variables
# that `git xet serve --storage s3://BUCKET` reads. One node keeping one copy of each object, or
# with GIT_XET_BENCH_REPLICAS=3 three nodes keeping three copies (each in a zone of its own),
# all of whose endpoints the servers are given (GIT_XET_S3_ENDPOINTS).
garage_pids=()
start_garage() {
    local replicas="${GIT_XET_BENCH_REPLICAS:-1}" secret i compression
    # Garage compresses blocks with zstd unless told not to (GIT_XET_BENCH_GARAGE_COMPRESSION:
    # a level, or none); xorbs are compressed already.
    compression="${GIT_XET_BENCH_GARAGE_COMPRESSION:-1}"
    [[ "$compression" == none ]] && compression='"none"'
    # Metadata in SQLite unless GIT_XET_BENCH_GARAGE_DB=lmdb: the Garage that .ci/run installs is
    # built with SQLite only; deploy/garage/garage.toml names LMDB, which Garage's release
    # binaries have and its docs recommend (`cargo install garage --features bundled-libs,lmdb`).
    local db="${GIT_XET_BENCH_GARAGE_DB:-sqlite}"
    secret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    local endpoints=() ids=()
    for i in $(seq 1 "$replicas"); do
        g="$work/garage$i"
        mkdir -p "$g"
        local rpc s3 admin
        rpc=$(free_port); s3=$(free_port); admin=$(free_port)
        cat > "$g/garage.toml" <<TOML
metadata_dir = "$g/meta"
data_dir = "$g/data"
db_engine = "$db"
replication_factor = $replicas
compression_level = $compression
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$secret"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"
[admin]
api_bind_addr = "127.0.0.1:$admin"
TOML
        RUST_LOG=warn "$garage" -c "$g/garage.toml" server > "$g/log" 2>&1 &
        pids+=($!)
        garage_pids+=($!)
        local node_id="" _
        for _ in $(seq 1 100); do
            node_id="$(gcli node id -q 2>/dev/null)" && [[ -n "$node_id" ]] && break
            sleep 0.2
        done
        [[ -n "$node_id" ]] || { echo "bench: garage did not start" >&2; cat "$g/log" >&2; exit 1; }
        ids+=("$node_id")
        endpoints+=("http://127.0.0.1:$s3")
    done
    # The first node's CLI sets up the cluster.
    g="$work/garage1"
    for i in "${!ids[@]}"; do
        [[ "$i" == 0 ]] || gcli node connect "${ids[$i]}" >/dev/null
    done
    # A node answers `node id` before its RPC listener takes the layout: try for a while.
    for i in "${!ids[@]}"; do
        for _ in $(seq 1 50); do
            gcli layout assign -z "dc$i" -c 10G "${ids[$i]%%@*}" >/dev/null 2>&1 && break
            sleep 0.2
        done
    done
    gcli layout apply --version 1 >/dev/null
    local key bucket
    key="$(gcli key create bench)"
    export AWS_REGION=garage
    if [[ "$replicas" == 1 ]]; then
        export AWS_ENDPOINT="${endpoints[0]}"
    else
        unset AWS_ENDPOINT
        GIT_XET_S3_ENDPOINTS="$(IFS=,; echo "${endpoints[*]}")"
        export GIT_XET_S3_ENDPOINTS
    fi
    AWS_ACCESS_KEY_ID="$(sed -n 's/^Key ID: *//p' <<<"$key" | tr -d ' ')"
    AWS_SECRET_ACCESS_KEY="$(sed -n 's/^Secret key: *//p' <<<"$key" | tr -d ' ')"
    export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
    for bucket in "$@"; do
        gcli bucket create "$bucket" >/dev/null
        gcli bucket allow --read --write --owner "$bucket" --key bench >/dev/null
    done
}
gcli() { RUST_LOG=warn "$garage" -c "$g/garage.toml" "$@"; }

# push_setup NAME MODE URL FILES: in a subshell that called use_home: installs git-xet for MODE
# (standalone: URL is the agent's endpoint; negotiated: URL/bench/<NAME>.git is the LFS server),
# creates $work/NAME-remote.git and $work/NAME-work holding a commit of FILES/*.bin, and leaves
# the shell in the work tree with `origin` set.
push_setup() {
    local name=$1 mode=$2 url=$3 files=$4
    export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 PATH="$(dirname "$bin"):$PATH"
    if [[ "$mode" == standalone ]]; then
        git xet install --global --endpoint "$url" >/dev/null
    else
        git xet install --global >/dev/null
    fi
    git init -q --bare "$work/$name-remote.git"
    git init -q "$work/$name-work"
    cd "$work/$name-work"
    [[ "$mode" == standalone ]] || git config lfs.url "$url/bench/$name.git/info/lfs"
    git lfs track '*.bin' >/dev/null
    # Standalone repositories are set up as docs/guide.md says (`install --local --endpoint`),
    # which writes git-xet's pre-push hook: it uploads the push's small files in packs before
    # git-lfs does (`git xet upload-ahead`). GIT_XET_BENCH_HOOK=0 keeps git-lfs's own hook.
    if [[ "$mode" == standalone && "${GIT_XET_BENCH_HOOK:-1}" == 1 ]]; then
        git xet install --local --endpoint "$url" >/dev/null
    fi
    cp "$files"/*.bin .
    git add . && git commit -q -m files
    git remote add origin "../$name-remote.git"
}
