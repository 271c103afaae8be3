//! The read-only FUSE filesystem of `git xet mount`, over a [`View`].
//!
//! Inode `n + 1` is node `n` of the view (the root is inode 1). Every file and directory is
//! read-only (`EROFS` for writes); sizes are the real sizes of LFS files, known from their
//! pointers, so `ls -l` downloads nothing.
//!
//! Reads of an LFS file read from the remote go through [`RangedFile`]: a read that misses
//! what is in memory fetches just what it asks for. A handle that goes on reading where its
//! last read ended is sequential, and its fetches grow with the run (twice what it has read so
//! far, up to [`SEQUENTIAL_SPAN`]); once the run passes [`READ_AHEAD_AFTER`], spans ahead of it
//! are fetched in the background too (up to [`READ_AHEAD_SPANS`], at most [`MAX_PREFETCH`]
//! fetches at once in the whole mount), so a scan does not pay a round trip per 128 KiB
//! request, while a reader of a header or of one tensor fetches little more than it reads. The kernel's requests are handled on
//! [`THREADS`] threads, so several reads are in flight at once. A read that fails (the server
//! gone past the retry horizon, damaged data) answers `EIO` for that read only and is logged
//! with the file and offset; the mount stays up.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

use super::view::{Node, Opened, View};
use crate::pipeline::ranged::RangedFile;

/// Bytes a sequential reader's miss fetches at once.
pub const SEQUENTIAL_SPAN: u64 = 8 << 20;

/// Spans fetched ahead of a sequential reader.
pub const READ_AHEAD_SPANS: u64 = 3;

/// A sequential run this long (bytes) starts the read-ahead.
pub const READ_AHEAD_AFTER: u64 = 2 << 20;

/// The most the kernel reads ahead by itself, per file (its own page-cache read-ahead, in
/// requests to us); ours is sized by the reader's run instead.
pub const KERNEL_READ_AHEAD: u32 = 128 << 10;

/// Background fetches at once, in the whole mount.
pub const MAX_PREFETCH: usize = 4;

/// Threads handling the kernel's requests.
pub const THREADS: usize = 4;

/// How long the kernel may keep attributes and entries (the tree never changes).
const TTL: Duration = Duration::from_secs(3600);

/// An open file.
struct Handle {
    opened: Arc<Opened>,
    /// Where the last read ended: a read starting there is sequential.
    last_end: AtomicU64,
    /// Bytes read in the current sequential run.
    run: AtomicU64,
    /// How far ahead fetches were asked for.
    ahead: AtomicU64,
}

/// The filesystem (see the module documentation).
pub struct XetFs {
    view: Arc<View>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_handle: AtomicU64,
    prefetching: Arc<AtomicUsize>,
    uid: u32,
    gid: u32,
    mounted_at: SystemTime,
}

impl XetFs {
    pub fn new(view: View) -> Self {
        #[cfg(unix)]
        let (uid, gid) = {
            use std::os::unix::fs::MetadataExt as _;
            std::fs::metadata(".").map_or((0, 0), |m| (m.uid(), m.gid()))
        };
        #[cfg(not(unix))]
        let (uid, gid) = (0, 0);
        Self {
            view: Arc::new(view),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            prefetching: Arc::new(AtomicUsize::new(0)),
            uid,
            gid,
            mounted_at: SystemTime::now(),
        }
    }

    fn node(&self, ino: INodeNo) -> Option<(usize, &Node)> {
        let id = usize::try_from(ino.0).ok()?.checked_sub(1)?;
        self.view.nodes.get(id).map(|n| (id, n))
    }

    fn attr(&self, id: usize, node: &Node) -> FileAttr {
        let (kind, size, perm) = match node {
            Node::Dir { .. } => (FileType::Directory, 0, 0o555),
            Node::File {
                size, executable, ..
            } => (
                FileType::RegularFile,
                *size,
                if *executable { 0o555 } else { 0o444 },
            ),
            Node::Symlink { target } => (FileType::Symlink, target.len() as u64, 0o777),
        };
        FileAttr {
            ino: INodeNo(id as u64 + 1),
            size,
            blocks: size.div_ceil(512),
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 128 << 10,
            flags: 0,
        }
    }

    fn handle(&self, fh: FileHandle) -> Option<Arc<Handle>> {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned()
    }

    /// Fetches the spans after `from` in the background, up to the read-ahead window.
    fn read_ahead(
        &self,
        handle: &Handle,
        file: &Arc<RangedFile>,
        endpoint: &crate::lfs::reader::EndpointHandle,
        from: u64,
    ) {
        let run = handle.run.load(Ordering::Relaxed);
        if run < READ_AHEAD_AFTER {
            return;
        }
        let limit = from
            .saturating_add((READ_AHEAD_SPANS * SEQUENTIAL_SPAN).min(run.saturating_mul(2)))
            .min(file.size());
        loop {
            let start = handle.ahead.load(Ordering::Relaxed).max(from);
            if start >= limit {
                return;
            }
            if self.prefetching.fetch_add(1, Ordering::AcqRel) >= MAX_PREFETCH {
                self.prefetching.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            let end = start.saturating_add(SEQUENTIAL_SPAN).min(file.size());
            handle.ahead.store(end, Ordering::Relaxed);
            let (file, endpoint, count) = (
                Arc::clone(file),
                endpoint.clone(),
                Arc::clone(&self.prefetching),
            );
            std::thread::spawn(move || {
                if !file.is_cached(start, end - start) {
                    if let Err(e) = file.fetch(endpoint.get(), start, end) {
                        tracing::debug!(
                            start,
                            end,
                            "read-ahead failed (a read will try again): {e}"
                        );
                    }
                }
                count.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// The bytes of one read.
    fn read_at(
        &self,
        handle: &Handle,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>, super::view::ViewError> {
        let sequential = handle
            .last_end
            .swap(offset.saturating_add(size), Ordering::Relaxed)
            == offset;
        let run = if sequential {
            handle.run.fetch_add(size, Ordering::Relaxed)
        } else {
            handle.run.store(size, Ordering::Relaxed);
            0
        };
        match handle.opened.as_ref() {
            Opened::Ranged { file, endpoint } => {
                if !file.is_cached(offset, size) {
                    let span = if sequential {
                        run.saturating_mul(2).min(SEQUENTIAL_SPAN).max(size)
                    } else {
                        size
                    };
                    file.fetch(endpoint.get(), offset, offset.saturating_add(span))?;
                    if sequential {
                        handle
                            .ahead
                            .fetch_max(offset.saturating_add(span), Ordering::Relaxed);
                    }
                }
                let data = file.read(endpoint.get(), offset, size)?;
                if sequential {
                    self.read_ahead(handle, file, endpoint, offset.saturating_add(size));
                }
                Ok(data)
            }
            other => other.read(offset, size),
        }
    }
}

impl Filesystem for XetFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // The kernel's limit may be lower already; either way it is not raised.
        if let Err(limit) = config.set_max_readahead(KERNEL_READ_AHEAD) {
            let _ = config.set_max_readahead(limit.max(1));
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some((_, Node::Dir { children })) = self.node(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let name = name.to_string_lossy();
        match children.iter().find(|(n, _)| *n == name) {
            Some((_, id)) => {
                let attr = self.attr(*id, &self.view.nodes[*id]);
                reply.entry(&TTL, &attr, Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino) {
            Some((id, node)) => reply.attr(&TTL, &self.attr(id, node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino) {
            Some((_, Node::Symlink { target })) => reply.data(target),
            _ => reply.error(Errno::EINVAL),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let Some((id, node)) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if !matches!(node, Node::File { .. }) {
            return reply.error(Errno::EISDIR);
        }
        match self.view.open_file(id) {
            Ok(opened) => {
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                let handle = Arc::new(Handle {
                    opened: Arc::new(opened),
                    last_end: AtomicU64::new(0),
                    run: AtomicU64::new(0),
                    ahead: AtomicU64::new(0),
                });
                self.handles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(fh, handle);
                // The content never changes: the kernel may keep its pages.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
            }
            Err(e) => {
                tracing::error!(ino = ino.0, "cannot open: {e}");
                reply.error(Errno::EIO);
            }
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(handle) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        match self.read_at(&handle, offset, u64::from(size)) {
            Ok(data) => reply.data(&data),
            Err(e) => {
                let path = match self.node(ino) {
                    Some((_, Node::File { path, .. })) => path.clone(),
                    _ => format!("inode {}", ino.0),
                };
                tracing::error!(%path, offset, size, "read failed (EIO): {e}");
                reply.error(Errno::EIO);
            }
        }
    }

    /// Nothing is buffered for writing (the mount is read-only), so a close has nothing to
    /// flush.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: fuser::ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some((id, Node::Dir { children })) = self.node(ino) else {
            return reply.error(Errno::ENOTDIR);
        };
        let mut entries: Vec<(u64, FileType, &str)> = vec![
            (id as u64 + 1, FileType::Directory, "."),
            (id as u64 + 1, FileType::Directory, ".."),
        ];
        for (name, child) in children {
            let kind = match &self.view.nodes[*child] {
                Node::Dir { .. } => FileType::Directory,
                Node::File { .. } => FileType::RegularFile,
                Node::Symlink { .. } => FileType::Symlink,
            };
            entries.push((*child as u64 + 1, kind, name.as_str()));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
