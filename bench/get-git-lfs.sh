#!/usr/bin/env bash
# Fetches Debian 13's git-lfs (3.6) into .bench/git-lfs, for the benchmarks (bench/lib.sh puts it
# first on PATH). It is a static Go binary, so it runs on Debian 12 as well; nothing is installed
# system-wide. Usage: bench/get-git-lfs.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.bench/git-lfs"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
curl -fsS -m 120 -o "$tmp/Packages.xz" "$mirror/dists/trixie/main/binary-amd64/Packages.xz"
file="$(xz -dc "$tmp/Packages.xz" | awk '/^Package: git-lfs$/{p=1} p&&/^Filename:/&&!f{print $2; f=1}')"
[[ -n "$file" ]] || { echo "get-git-lfs: no git-lfs in Debian 13's package list" >&2; exit 1; }
curl -fsS -m 300 -o "$tmp/git-lfs.deb" "$mirror/$file"
rm -rf "$dest" && mkdir -p "$dest"
dpkg -x "$tmp/git-lfs.deb" "$dest"
"$dest/usr/bin/git-lfs" version
