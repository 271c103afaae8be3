//! Reading a repository's files at a ref without downloading them: `git xet cat` and `git xet
//! mount`.
//!
//! | module | owns |
//! |---|---|
//! | [`view`] | the tree at a ref, as `git checkout` would write it, and the bytes of each file: git's objects for ordinary files, the local LFS store or ranged reads of the remote for LFS files |
//! | [`fs`] | the read-only FUSE filesystem over a [`view::View`] |
//! | [`readahead`] | the sequential streams within each open file, their read-ahead windows, and the queue and threads of background fetches |

#[cfg(feature = "mount")]
pub mod fs;
#[cfg(feature = "mount")]
pub mod readahead;
pub mod view;
