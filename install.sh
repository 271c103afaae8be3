#!/bin/sh
# Installs git-xet from this source checkout, with what it needs, on Debian/Ubuntu (apt-get) and
# macOS (Homebrew). Run it from the checkout: ./install.sh --help
set -eu

usage() {
    cat <<'EOF'
Usage: ./install.sh [-y] [--agent-only] [--endpoint URL-or-DIR] [--no-demo]

Installs git-xet from this source checkout:
  1. git and git-lfs, if missing (apt-get on Debian/Ubuntu, with sudo unless root;
     Homebrew on macOS)
  2. Rust through rustup, if cargo is missing (asks first), and a C compiler
  3. git-xet: cargo install --path . --locked   (into ~/.cargo/bin), and its man pages
     (git xet man: into ~/.cargo/share/man/man1, where `git help xet` finds them).
     The build needs about 1 GB of free disk in the checkout's target/ directory and takes
     minutes (see "Install" in README.md for measured times); an interrupted or failed build
     resumes where it stopped when this script runs again.
  4. git xet install: registers git-xet with Git LFS in your global git configuration
  5. fuse3 on Linux, for `git xet mount` (asks first; everything else works without it)
  6. git xet demo, if this git-xet has that command

Options:
  -y, --yes               install what is missing without asking
  --agent-only            build only the transfer agent and the git commands (no `git xet
                          serve`, no S3 storage, no `git xet mount`): a shorter build and a
                          smaller binary (cargo install --no-default-features)
  --endpoint URL-or-DIR   standalone mode: LFS objects go to this `git xet serve` URL or
                          local directory, for every repository (git xet install --endpoint)
  --no-demo               do not run `git xet demo` at the end
  -h, --help              show this help

Undo with: git xet uninstall; cargo uninstall git-xet; rm ~/.cargo/share/man/man1/git-xet*.1
EOF
}

say() { printf '==> %s\n' "$*"; }
warn() { printf 'install.sh: warning: %s\n' "$*" >&2; }
die() {
    printf 'install.sh: error: %s\n' "$*" >&2
    exit 1
}

assume_yes=0
agent_only=0
endpoint=""
demo=1
while [ $# -gt 0 ]; do
    case $1 in
        -y | --yes) assume_yes=1 ;;
        --agent-only) agent_only=1 ;;
        --endpoint)
            [ $# -ge 2 ] || die "--endpoint needs a value: a git xet serve URL or a directory"
            endpoint=$2
            shift
            ;;
        --endpoint=*) endpoint=${1#--endpoint=} ;;
        --no-demo) demo=0 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            printf 'install.sh: unknown option: %s\n\n' "$1" >&2
            usage >&2
            exit 2
            ;;
    esac
    shift
done
case $endpoint in
    -*) die "--endpoint needs a value: a git xet serve URL or a directory (got $endpoint)" ;;
    # URLs (git xet install parses and checks them), absolute paths and ~/… (which git xet
    # install expands) go through as they are.
    '' | *://* | /* | '~' | '~/'*) ;;
    # A relative directory is relative to where the script was started, not to the checkout.
    *) endpoint="$(pwd)/$endpoint" ;;
esac

# confirm QUESTION: true with -y, else asks on the terminal.
confirm() {
    [ "$assume_yes" = 1 ] && return 0
    [ -t 0 ] || die "$1 Cannot ask without a terminal: run again with -y to answer yes."
    printf '%s [y/N] ' "$1"
    answer=""
    read -r answer || true
    case $answer in
        [yY] | [yY][eE][sS]) return 0 ;;
        *) return 1 ;;
    esac
}

os=$(uname -s)
apt_updated=0

# as_root COMMAND...: runs it as root (directly, or with sudo).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "this needs root and sudo is missing: run as root, or run yourself: $*"
    fi
}

# install_packages PACKAGE...: with apt-get or Homebrew, after asking.
install_packages() {
    case $os in
        Linux)
            command -v apt-get >/dev/null 2>&1 ||
                die "$* missing, and this script installs packages only with apt-get (Debian, Ubuntu) or Homebrew (macOS): install $* yourself, then run it again"
            confirm "Install $* with apt-get?" || die "$* is needed: install it, then run this again"
            if [ "$apt_updated" = 0 ]; then
                say "apt-get update"
                as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
                apt_updated=1
            fi
            say "apt-get install $*"
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
            ;;
        Darwin)
            command -v brew >/dev/null 2>&1 ||
                die "$* missing, and Homebrew is not installed (https://brew.sh): install Homebrew or $* yourself, then run this again"
            confirm "Install $* with Homebrew?" || die "$* is needed: install it, then run this again"
            say "brew install $*"
            brew install "$@"
            ;;
        *)
            die "$* missing, and this script does not know how to install packages on $os: install $* yourself, then run it again"
            ;;
    esac
}

# The checkout: where this script is.
cd "$(dirname "$0")"
grep -q '^name = "git-xet"' Cargo.toml 2>/dev/null ||
    die "run install.sh from the git-xet source checkout (no git-xet Cargo.toml in $(pwd))"

# 1. git and git-lfs.
if ! command -v git >/dev/null 2>&1; then
    install_packages git
fi
if git lfs version >/dev/null 2>&1; then
    say "git-lfs is installed: $(git lfs version)"
else
    install_packages git-lfs
    git lfs version >/dev/null 2>&1 || die "git-lfs is still not usable after installing it"
fi

# 2. Rust (1.80 or newer) and a C compiler (some dependencies compile C).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
if ! command -v cargo >/dev/null 2>&1 && [ -x "$cargo_home/bin/cargo" ]; then
    PATH="$cargo_home/bin:$PATH"
    export PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
    confirm "cargo (Rust) is missing. Install Rust with rustup (https://rustup.rs) into $cargo_home?" ||
        die "Rust is needed to build git-xet: install it (https://rustup.rs), then run this again"
    if ! command -v curl >/dev/null 2>&1; then
        install_packages curl ca-certificates
    fi
    say "installing Rust with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    PATH="$cargo_home/bin:$PATH"
    export PATH
    command -v cargo >/dev/null 2>&1 || die "cargo is still missing after installing Rust"
fi
rust_version=$(cargo --version | awk '{print $2}')
rust_minor=$(printf '%s\n' "$rust_version" | awk -F. '{print $2}')
case $rust_minor in
    '' | *[!0-9]*) warn "cannot tell the Rust version from '$(cargo --version)'; trying anyway" ;;
    *)
        if [ "$rust_minor" -lt 80 ]; then
            if command -v rustup >/dev/null 2>&1 && confirm "Rust $rust_version is too old (git-xet needs 1.80). Update it with rustup?"; then
                rustup update stable
            else
                die "Rust $rust_version is too old: git-xet needs 1.80 or newer (rustup update stable)"
            fi
        fi
        ;;
esac
if ! command -v cc >/dev/null 2>&1; then
    case $os in
        Darwin) die "no C compiler: run xcode-select --install, then run this again" ;;
        *) install_packages gcc libc6-dev ;;
    esac
fi

# 3. git-xet. The build goes to the checkout's own target/ (or CARGO_TARGET_DIR), not to a
# temporary directory, so that a rerun after a failure or an interruption resumes instead of
# starting over.
target_dir=${CARGO_TARGET_DIR:-$(pwd)/target}
mkdir -p "$target_dir"
# free_gb DIR: whole gigabytes free on DIR's file system (empty when df cannot tell).
free_gb() { df -Pk "$1" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }'; }
need_gb=1
features=""
what="git-xet"
if [ "$agent_only" = 1 ]; then
    features="--no-default-features"
    what="git-xet (agent only)"
fi
free=$(free_gb "$target_dir")
if [ -n "$free" ] && [ "$free" -lt "$need_gb" ]; then
    die "building $what needs about $need_gb GB free in $target_dir; $free GB are free there: free some space (or set CARGO_TARGET_DIR to a disk with room), then run this again"
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo "?")
say "building $what: cargo install --path . --locked $features"
say "  about 1 GB of disk in $target_dir; a release build of every dependency, which takes minutes ($cores cores here; README.md, \"Install\", has measured times)"
build_started=$(date +%s)
# shellcheck disable=SC2086 # $features is one option or none
if ! cargo install --path . --locked --target-dir "$target_dir" $features; then
    elapsed=$(($(date +%s) - build_started))
    free=$(free_gb "$target_dir")
    printf '\ninstall.sh: error: building git-xet failed after %s s (cargo'"'"'s messages above say where).\n' "$elapsed" >&2
    if [ -n "$free" ] && [ "$free" -lt 1 ]; then
        printf 'The disk holding %s is full (%s GB free): free some space.\n' "$target_dir" "$free" >&2
    fi
    printf 'Run ./install.sh again: what was already built in %s is kept, so the build resumes where it stopped.\n' "$target_dir" >&2
    exit 1
fi
say "built in $(($(date +%s) - build_started)) s"
bin_dir=${CARGO_INSTALL_ROOT:-$cargo_home}/bin
if [ -x "$bin_dir/git-xet" ]; then
    case ":$PATH:" in
        *":$bin_dir:"*) ;;
        *)
            warn "$bin_dir is not on your PATH: add it (for example, in ~/.profile: export PATH=\"$bin_dir:\$PATH\") so that \`git xet\` works in new shells"
            PATH="$bin_dir:$PATH"
            export PATH
            ;;
    esac
fi
command -v git-xet >/dev/null 2>&1 || die "git-xet was built but cannot be found in $bin_dir or on PATH"
say "installed $(command -v git-xet) ($(git-xet --version))"

# `git xet mount` needs FUSE 3 (everything else works without it): installed with apt-get when
# the user agrees (and root or sudo is there), else a note; a failure here stops nothing.
install_fuse3() {
    if [ "$apt_updated" = 0 ]; then
        say "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
        apt_updated=1
    fi
    say "apt-get install fuse3"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3
}
if [ "$os" = Linux ] && [ "$agent_only" = 0 ] && ! command -v fusermount3 >/dev/null 2>&1; then
    fuse_note="\`git xet mount\` needs it (Debian/Ubuntu: apt-get install fuse3); \`git xet cat\` and everything else work without it"
    if command -v apt-get >/dev/null 2>&1 &&
        { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; } &&
        { [ "$assume_yes" = 1 ] || [ -t 0 ]; } &&
        confirm "Install fuse3 with apt-get (for git xet mount)?"; then
        install_fuse3 || warn "fuse3 could not be installed: $fuse_note"
    else
        warn "fusermount3 is missing: $fuse_note"
    fi
fi

# The man pages, beside the binary: `man` searches <dir>/../share/man for each <dir> on PATH, so
# `git xet --help` (which git turns into `git help xet`, i.e. `man git-xet`) finds them.
if "$bin_dir/git-xet" man --help >/dev/null 2>&1; then
    say "installing the man pages: git xet man"
    "$bin_dir/git-xet" man || warn "could not install the man pages; \`git xet <command> --help\` works without them"
    command -v man >/dev/null 2>&1 ||
        warn "man is not installed, so \`git xet --help\` cannot show the manual: install man-db, or use \`git xet <command> --help\`"
fi

# 4. Register it with Git LFS, from outside any repository (`git lfs install` also sets up
# hooks in the repository it runs in).
cd /
if [ -n "$endpoint" ]; then
    say "git xet install --endpoint $endpoint"
    git xet install --endpoint "$endpoint"
else
    say "git xet install"
    git xet install
fi

# 5. The demo, when this git-xet has one.
if [ "$demo" = 1 ]; then
    if git xet demo --help >/dev/null 2>&1; then
        say "git xet demo"
        git xet demo || warn "the demo failed; git-xet is installed all the same (see git xet status)"
    else
        say "no demo in this git-xet version; skipped"
    fi
fi

say "done. Check the setup any time with: git xet status"
