#!/usr/bin/env bash
# Benchmark: `git-xet serve` under the reference client (hf_xet) as the load.
#
# Usage: bench/serve.sh [SIZE_MIB]
#
#   SIZE_MIB             size of the test file in MiB (default 512)
#   GIT_XET_HF_PYTHON    a Python with `hf_xet` installed (default: .venv/bin/python in the crate
#                        root, then /tmp/hfvenv/bin/python)
#
# Steps: build the release binary; write a mixed file (a quarter each: random bytes, text lines,
# zeros, a repeated 64 KiB block, in 8 MiB stripes) into a temporary directory; start
# `git-xet serve` on 127.0.0.1:0 with a temporary store (it stops by itself after 30 minutes at
# the latest); upload the file with `hf_xet.upload_files` (default settings, telemetry off,
# a fresh client cache) and time it; download it by its Xet hash with `hf_xet.download_files`
# (a fresh cache again) and time it; compare the bytes; print both throughputs (MB = 10^6 bytes
# of the file per second) and how much the store holds. Everything is removed afterwards.
#
# Client and server share the machine (and its cores), so this measures the pair, not the
# server alone. This is a measurement, not a test.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
size_mib="${1:-512}"

# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
find_hf_python

build_release

make_work serve-bench
start_server server
url="$server_url"
echo "bench: server at $url, store $work/server-store" >&2

write_mixed "$work/input.bin" "$size_mib"
HF_XET_TELEMETRY_ENABLED=false "$python" - "$url" "$token" "$work" "$size_mib" <<'PY'
import os, sys, time

url, token, work, size_mib = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
path = os.path.join(work, "input.bin")
size = size_mib * 1024 * 1024

def env_cache(name):
    cache = os.path.join(work, name)
    os.makedirs(cache)
    os.environ["HF_HOME"] = cache
    os.environ["HF_XET_CACHE"] = os.path.join(cache, "xet")

import hf_xet  # the client caches go to the temporary directory (set before the first call)

env_cache("cache-upload")
t = time.perf_counter()
info = hf_xet.upload_files([path], url, (token, int(time.time()) + 3600), None, None, "model")[0]
up = time.perf_counter() - t

env_cache("cache-download")
out = os.path.join(work, "output.bin")
t = time.perf_counter()
hf_xet.download_files([hf_xet.PyXetDownloadInfo(out, info.hash, info.file_size)], url,
                      (token, int(time.time()) + 3600), None, None)
down = time.perf_counter() - t

same = True
with open(path, "rb") as a, open(out, "rb") as b:
    while True:
        x, y = a.read(1 << 24), b.read(1 << 24)
        if x != y:
            same = False
            break
        if not x:
            break

stored = 0
for d, _, files in os.walk(os.path.join(work, "server-store", "xorbs")):
    stored += sum(os.path.getsize(os.path.join(d, f)) for f in files)
mb = lambda s: size / s / 1e6
print(f"file:            {size} bytes, Xet hash {info.hash}")
print(f"ingest:          {mb(up):8.1f} MB/s  ({up:.2f} s, hf_xet.upload_files)")
print(f"reconstruction:  {mb(down):8.1f} MB/s  ({down:.2f} s, hf_xet.download_files)")
print(f"stored xorbs:    {stored} bytes ({stored / size:.1%} of the file)")
if not same:
    print("MISMATCH: the downloaded file differs from the uploaded one")
    sys.exit(1)
print("round trip:      bytes identical")
PY
