//! The lock recipes: each is a [`crate::lock_core::LockSpec`] (its marker and admission rule)
//! on a [`crate::lock_core::LockCore`], plus the [`Lock`] trait they share and the multi-lock
//! that composes them. A recipe never reaches past the core into the queue or the hold.

mod lock;
mod multi_lock;
mod mutex;
mod rwlock;
mod semaphore;
mod semaphore_mutex;

pub use self::lock::{Lock, LockExt};
pub use self::multi_lock::InterProcessMultiLock;
pub use self::mutex::InterProcessMutex;
pub use self::rwlock::{InterProcessReadWriteLock, ReadLock, WriteLock};
pub use self::semaphore::InterProcessSemaphore;
pub use self::semaphore_mutex::InterProcessSemaphoreMutex;
// The rules themselves, for reading a tree without joining it (`crate::inspect`).
pub(crate) use self::rwlock::RwRule;
pub(crate) use self::semaphore::Weighted;
