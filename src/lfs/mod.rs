//! The Git LFS custom transfer agent (`git-xet transfer`), which git-lfs runs and talks to over
//! stdin/stdout.
//!
//! | module | owns |
//! |---|---|
//! | [`protocol`] | messages, the per-process state machine, and the stdout writer |

pub mod protocol;
