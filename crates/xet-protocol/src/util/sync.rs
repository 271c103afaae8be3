//! Locks taken whether or not a thread panicked while holding them. A panic is a bug, but the
//! data behind each of this workspace's locks stays usable (every critical section leaves it
//! whole, or its state is a cache or a counter), and the process has other work to finish: an
//! agent mid-transfer, a server with other requests. One place says so, instead of a
//! `unwrap_or_else(|p| p.into_inner())` at each lock.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], taking the guard from a poisoned lock too.
pub trait LockAnyway<T: ?Sized> {
    fn lock_anyway(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockAnyway<T> for Mutex<T> {
    fn lock_anyway(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`], taking the guard from a poisoned lock too.
pub trait RwLockAnyway<T: ?Sized> {
    fn read_anyway(&self) -> RwLockReadGuard<'_, T>;
    fn write_anyway(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockAnyway<T> for RwLock<T> {
    fn read_anyway(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_anyway(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`Condvar::wait`], taking the guard back from a poisoned lock too.
pub fn wait_anyway<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_a_thread_panicked_in_is_still_taken() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let r = std::sync::Arc::new(RwLock::new(2));
        let (m2, r2) = (m.clone(), r.clone());
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            let _w = r2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && r.is_poisoned());
        *m.lock_anyway() += 1;
        *r.write_anyway() += 1;
        assert_eq!((*m.lock_anyway(), *r.read_anyway()), (2, 3));
    }
}
