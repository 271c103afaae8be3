//! The crate's only unsafe code: file mappings, four system calls and allocator settings that
//! neither std nor a crate already in the tree wraps safely; and the other calls that exist on
//! some systems only. Everything else in git-xet is safe Rust, which the `unsafe_code = "deny"`
//! lint of Cargo.toml enforces; this module is the one place that allows it, and each block
//! says why it is sound.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
#[cfg(unix)]
use std::path::Path;

/// Maps `len` bytes of `file` from `offset`, read-only.
///
/// A mapping reflects the file: if another process truncates or rewrites it while it is mapped,
/// what is read changes (or, past a truncation, the process gets `SIGBUS`). Callers map files
/// that are theirs (a spooled upload) or that they only hash (an LFS object), and accept that
/// caveat, which every mmap-based tool shares, for the speed on large files.
pub fn map_readonly(file: &File, offset: u64, len: usize) -> io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only; the caveat about concurrent writers is documented above
    // and accepted by every caller.
    unsafe {
        memmap2::MmapOptions::new()
            .offset(offset)
            .len(len)
            .map(file)
    }
}

/// Maps the whole of `file`, read-only; see [`map_readonly`].
pub fn map_whole(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: as in `map_readonly`.
    unsafe { memmap2::Mmap::map(file) }
}

/// Whether this user may create and remove entries in the directory `path`
/// (`access(W_OK | X_OK)`). `false` for a path with a NUL byte.
#[cfg(unix)]
pub fn may_write_dir(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; access(2) only reads
    // it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// Bytes an unprivileged writer may still use on the filesystem holding `path` (statvfs(3):
/// available blocks times the fragment size).
#[cfg(unix)]
pub fn available_space(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: an all-zero `statvfs` is a valid value of this plain C struct of integers.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `stat` a writable, properly sized struct that
    // statvfs(3) only writes into; both outlive the call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Ok((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// Whether process `pid` exists (`kill(pid, 0)`): `Some(false)` only when the system says
/// there is no such process; `None` when that cannot be told (an impossible pid, another
/// platform).
#[cfg(unix)]
pub fn process_exists(pid: u32) -> Option<bool> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
    // SAFETY: signal 0 sends nothing; kill(2) only checks that the process exists and may be
    // signalled. No memory is passed.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        return Some(true);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => Some(false),
        // EPERM: it exists, as another user's.
        Some(libc::EPERM) => Some(true),
        _ => None,
    }
}

/// See the Unix version: nothing can be told here.
#[cfg(not(unix))]
pub fn process_exists(_pid: u32) -> Option<bool> {
    None
}

/// Makes `to` (open for writing) a copy of the whole of `from` that shares its blocks on disk
/// (Linux's `FICLONE`: a reflink), where the filesystem allows it (btrfs, XFS made with
/// reflink, bcachefs): nothing is written but metadata, whatever the size. An error when the
/// filesystem cannot (`EOPNOTSUPP`, `EINVAL`), the files are on two filesystems (`EXDEV`), or
/// on another platform; `to` is then unchanged.
#[cfg(target_os = "linux")]
pub fn clone_file(from: &File, to: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: FICLONE takes the source's descriptor as its argument, by value; both
    // descriptors stay open for the call (borrowed `File`s) and no memory is passed.
    let rc = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// See the Linux version: no reflinks here.
#[cfg(not(target_os = "linux"))]
pub fn clone_file(_from: &File, _to: &File) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// A second descriptor of `file` (open for writing) whose writes skip the page cache (Linux's
/// `O_DIRECT`, through `/proc/self/fd`): for bytes written once and not read soon, one copy
/// into the device's queue instead of a copy into the page cache that the kernel's flusher
/// then writes out. Its writes must start and end at multiples of the device's logical block
/// size, from memory aligned the same way; the filesystem refuses others (`EINVAL`). An error
/// where the filesystem does not allow it (tmpfs before Linux 6.6, some FUSE filesystems),
/// without `/proc`, or on another platform.
#[cfg(target_os = "linux")]
pub fn reopen_direct(file: &File) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// See the Linux version: never here.
#[cfg(not(target_os = "linux"))]
pub fn reopen_direct(_file: &File) -> io::Result<File> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Makes glibc's allocator use one arena for every thread. By default each thread that
/// allocates while another holds an arena gets one of its own (up to eight per core), and
/// every arena keeps the multi-MiB blocks freed into it: a long-running process that moves
/// many such buffers between threads (the mount's fetches) then holds several times what it
/// uses, and pays page faults for fresh memory instead of reusing freed blocks. With one
/// arena, freed blocks are reused by whichever thread allocates next. Nothing on other C
/// libraries.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_allocator_arena() {
    // SAFETY: mallopt only sets an allocator parameter, before the threads that would use
    // more arenas exist; no memory is passed, and a refusal (return 0) leaves the default.
    let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// See the glibc version: other allocators need nothing.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_allocator_arena() {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn processes_that_exist() {
        assert_eq!(process_exists(std::process::id()), Some(true));
        assert_eq!(process_exists(0), None);
        assert_eq!(process_exists(u32::MAX), None);
        // A child that has exited and been waited for is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(process_exists(pid), Some(false));
    }

    #[test]
    fn maps_and_system_calls() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789").unwrap();
        assert_eq!(&map_whole(&f).unwrap()[..], b"0123456789");
        assert_eq!(&map_readonly(&f, 0, 4).unwrap()[..], b"0123");
        #[cfg(unix)]
        {
            let dir = tempfile::tempdir().unwrap();
            assert!(may_write_dir(dir.path()));
            assert!(!may_write_dir(&dir.path().join("missing")));
            assert!(available_space(dir.path()).unwrap() > 0);
            assert!(available_space(&dir.path().join("missing")).is_err());
        }
    }
}
