//! A filesystem of its own for a test: an XFS image (reflink on, as mkfs.xfs makes it by
//! default) mounted through a loop device on a temporary directory, unmounted and removed when
//! dropped. Needs root (`#[needs(xfs_loop)]`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted XFS image; see the module documentation.
pub struct LoopXfs {
    mount: PathBuf,
    // Dropped after the unmount: holds the image and the mount point.
    _dir: tempfile::TempDir,
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl LoopXfs {
    /// A new XFS of `mib` MiB (300 at least: mkfs.xfs's smallest), mounted.
    pub fn mount(mib: u64) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let image = dir.path().join("xfs.img");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(mib << 20))
            .expect("a sparse image file");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("a mount point");
        run("mkfs.xfs", &["-q", "-f", &image.to_string_lossy()]);
        run(
            "mount",
            &[
                "-o",
                "loop",
                &image.to_string_lossy(),
                &mount.to_string_lossy(),
            ],
        );
        Self { mount, _dir: dir }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Whether every extent of the file at `path` is shared with another file (`filefrag`'s
    /// `shared` flag): a clone's blocks are its original's.
    pub fn all_shared(path: &Path) -> bool {
        let out = Command::new("filefrag")
            .arg("-v")
            .arg(path)
            .output()
            .expect("filefrag runs");
        let text = String::from_utf8_lossy(&out.stdout);
        // Extent lines start with their index ("   0:   0..  99:"), after the header lines.
        let extents: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            })
            .collect();
        !extents.is_empty() && extents.iter().all(|l| l.contains("shared"))
    }
}

impl Drop for LoopXfs {
    fn drop(&mut self) {
        // The loop device goes with the unmount (mount -o loop made it autoclear); lazily, so
        // that a process still in the tree does not keep it mounted.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}
