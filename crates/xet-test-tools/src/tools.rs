//! The tools `#[needs]` knows: the name a test writes and what to tell whoever lacks it. Shared
//! by the build script (which looks for each) and the macro (which names the missing ones).

/// `(name in #[needs(…)], what is needed and how to install it)`.
pub const TOOLS: &[(&str, &str)] = &[
    ("git_lfs", "git-lfs (apt-get install git-lfs)"),
    ("nginx", "nginx (apt-get install nginx)"),
    (
        "fuse",
        "FUSE: /dev/fuse and fusermount3 (apt-get install fuse3)",
    ),
    (
        "userns_mount",
        "unshare (util-linux) and a kernel that lets a user namespace mount a tmpfs",
    ),
    ("promtool", "promtool (apt-get install prometheus)"),
    (
        "xfs_loop",
        "mkfs.xfs (apt-get install xfsprogs), filefrag (e2fsprogs), and root with loop devices \
         (/dev/loop-control) to mount an XFS image",
    ),
    ("chromium", "chromium (apt-get install chromium)"),
    (
        "systemd_analyze",
        "systemd-analyze (Debian's systemd package)",
    ),
    (
        "garage",
        "Garage (cargo install garage --version 2.5.0 --locked, or GARAGE=/path/to/garage)",
    ),
    (
        "hf_xet",
        "the reference client (python3 -m venv .venv && .venv/bin/pip install hf-xet==1.8.0 \
         in the workspace root, or GIT_XET_HF_PYTHON=a Python that can import hf_xet)",
    ),
];
