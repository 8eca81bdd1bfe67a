//! Faults a test arms on the fetches a message's context is gathered with (`GET /channels/{id}`
//! and `GET /channels/{c}/messages/{m}`): Discord slow to answer, or refusing as it refuses a
//! channel the bot may no longer view.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How the two fetch routes answer while a fault is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchFault {
    /// The usual answer, this long after the request arrived.
    Slow(Duration),
    /// 403 with `{"message": "Missing Access", "code": 50001}`, Discord's own refusal.
    Refused,
}

/// The armed fault, and how many requests it met.
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    armed: Mutex<Option<FetchFault>>,
    met: AtomicU64,
}

impl Keeper {
    /// Arms `fault`, or disarms with `None`.
    pub fn arm(&self, fault: Option<FetchFault>) {
        *self.armed.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// The fault a fetch arriving now meets, counted.
    pub fn meet(&self) -> Option<FetchFault> {
        let fault = *self.armed.lock().unwrap_or_else(|p| p.into_inner());
        if fault.is_some() {
            self.met.fetch_add(1, Ordering::SeqCst);
        }
        fault
    }

    /// How many fetches met an armed fault.
    pub fn met(&self) -> u64 {
        self.met.load(Ordering::SeqCst)
    }
}
