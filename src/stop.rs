//! Stopping a run politely (SIGTERM, SIGINT, SIGHUP): see [`Stop`].

use crate::error::PartitionError;

/// A request to stop a run: no new partition starts, computations in flight are abandoned
/// (they wrote nothing), swaps in flight finish; the partitions not committed are reported
/// [`Action::Stopped`](crate::commit::Action::Stopped), their leases released, the journal written.
#[derive(Debug, Default)]
pub struct Stop {
    signal: std::sync::OnceLock<&'static str>,
    notify: tokio::sync::Notify,
}

impl Stop {
    /// Asks the run to stop; `why` names the cause (`SIGTERM`).
    pub fn stop(&self, why: &'static str) {
        let _ = self.signal.set(why);
        self.notify.notify_waiters();
    }

    /// The cause when asked to stop.
    pub fn stopped(&self) -> Option<&'static str> {
        self.signal.get().copied()
    }

    /// Fails with [`PartitionError::Stopped`] once asked to stop.
    pub fn check(&self) -> std::result::Result<(), PartitionError> {
        match self.stopped() {
            Some(signal) => Err(PartitionError::Stopped { signal }),
            None => Ok(()),
        }
    }

    /// Resolves when asked to stop.
    pub async fn wait(&self) -> PartitionError {
        loop {
            let notified = self.notify.notified();
            if let Some(signal) = self.stopped() {
                return PartitionError::Stopped { signal };
            }
            notified.await;
        }
    }

    /// `work`, unless asked to stop first: then it is dropped (abandoned).
    pub async fn unless<T>(
        &self,
        work: impl std::future::Future<Output = std::result::Result<T, PartitionError>>,
    ) -> std::result::Result<T, PartitionError> {
        self.check()?;
        tokio::select! {
            r = work => r,
            e = self.wait() => Err(e),
        }
    }
}
