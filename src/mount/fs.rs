//! The read-only FUSE filesystem of `git xet mount`, over a [`View`].
//!
//! Inode `n + 1` is node `n` of the view (the root is inode 1). Every file and directory is
//! read-only (`EROFS` for writes); sizes are the real sizes of LFS files, known from their
//! pointers, so `ls -l` downloads nothing. The names are the view's, what `git checkout` would
//! write: a lookup of a name git refuses (`.git`, …) answers `ENOENT` before the tree is looked
//! at.
//!
//! Reads of an LFS file read from the remote go through [`RangedFile`](xet_client::pipeline::ranged::RangedFile): a read that misses
//! what is in memory fetches the whole chunks it covers and no more, and waits for a fetch
//! already getting its bytes rather than fetching them again. Each handle follows the
//! sequential streams within the file ([`super::readahead`]): a stream that proves sequential
//! is read ahead in the background by a window that grows with it, several streams of a file
//! at once, so a scan (or pyarrow reading the column chunks of a column in turn) does not wait
//! a round trip per request, while a reader of a header or of one tensor fetches little more
//! than it reads. A read that must fetch takes a queued read-ahead range it touches into its
//! own request. The kernel's own read-ahead is capped at [`KERNEL_READ_AHEAD`] (it would
//! otherwise turn a 64 KiB read into a 128 KiB one). The kernel's requests are handled on
//! [`THREADS`] threads, so several reads are in flight at once. A read that fails (the server
//! gone past the retry horizon, damaged data) answers `EIO` for that read only and is logged
//! with the file and offset; the mount stays up.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};

use super::readahead::{Prefetcher, Streams, Target, PREFETCH_THREADS};
use super::view::{Node, Opened, View};
use crate::git::checkout;
use xet_protocol::util::sync::LockAnyway as _;

/// The most the kernel reads ahead by itself, per file (its own page-cache read-ahead, in
/// requests to us); ours follows the reader's streams instead.
pub(crate) const KERNEL_READ_AHEAD: u32 = 64 << 10;

/// Threads handling the kernel's requests: as many as a reader of several streams of a file
/// (pyarrow's I/O threads) may have waiting at once.
pub(crate) const THREADS: usize = 8;

/// How long the kernel may keep attributes and entries (the tree never changes).
const TTL: Duration = Duration::from_secs(3600);

/// An open file.
struct Handle {
    opened: Arc<Opened>,
    /// Its readers' sequential streams (reads reach several threads).
    streams: Mutex<Streams>,
}

impl Handle {
    fn streams(&self) -> MutexGuard<'_, Streams> {
        self.streams.lock_anyway()
    }
}

/// The filesystem (see the module documentation).
pub(crate) struct XetFs {
    view: Arc<View>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_handle: AtomicU64,
    prefetcher: Prefetcher,
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
            prefetcher: Prefetcher::new(PREFETCH_THREADS),
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
        self.handles.lock_anyway().get(&fh.0).cloned()
    }

    /// The bytes of one read.
    fn read_at(
        &self,
        handle: &Handle,
        offset: u64,
        size: u64,
    ) -> Result<bytes::Bytes, super::view::ViewError> {
        let Opened::Ranged { file, endpoint } = handle.opened.as_ref() else {
            return handle.opened.read(offset, size);
        };
        let advice = handle.streams().read(offset, size, file.size());
        let target = Target {
            file: Arc::clone(file),
            endpoint: endpoint.clone(),
        };
        // The bytes ahead of the stream are queued before this read waits for anything.
        for &(start, end) in &advice.ahead {
            if !self.prefetcher.submit(target.clone(), start, end) {
                handle.streams().not_queued(advice.stream, start);
                break;
            }
        }
        // A read that must fetch takes along a queued range it touches (this read's own
        // read-ahead, when the stream has caught up with it): one request instead of two.
        let end = offset.saturating_add(size).min(file.size());
        let mut fetch_len = size;
        if file.missing(offset, end) {
            if let Some((_, taken)) = self.prefetcher.take(&target, offset, end) {
                fetch_len = taken.saturating_sub(offset).max(size);
            }
        }
        Ok(file.read_fetching(endpoint.get(), offset, size, fetch_len)?)
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

    /// A name git would not check out is not there, whatever the tree holds.
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some((dir, Node::Dir { .. })) = self.node(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let name = name.as_bytes();
        if checkout::check(&[name], false).is_err() {
            return reply.error(Errno::ENOENT);
        }
        match self.view.child(dir, name) {
            Some(id) => {
                let attr = self.attr(id, &self.view.nodes[id]);
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
                    streams: Mutex::new(Streams::default()),
                });
                self.handles.lock_anyway().insert(fh, handle);
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
        tracing::trace!(ino = ino.0, offset, size, "read");
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
        let closed = self.handles.lock_anyway().remove(&fh.0);
        // The last handle of a remote file closed: its spans leave memory (the view keeps
        // one reference to the file, this handle the other).
        if let Some(Opened::Ranged { file, .. }) = closed.as_ref().map(|h| h.opened.as_ref()) {
            if Arc::strong_count(file) <= 2 {
                file.forget_spans();
            }
        }
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
        let mut entries: Vec<(u64, FileType, &OsStr)> = vec![
            (id as u64 + 1, FileType::Directory, OsStr::new(".")),
            (id as u64 + 1, FileType::Directory, OsStr::new("..")),
        ];
        for (name, child) in children {
            let kind = match &self.view.nodes[*child] {
                Node::Dir { .. } => FileType::Directory,
                Node::File { .. } => FileType::RegularFile,
                Node::Symlink { .. } => FileType::Symlink,
            };
            entries.push((*child as u64 + 1, kind, OsStr::from_bytes(name)));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}
