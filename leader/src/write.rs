//! One write to the Kubernetes API through the [`LeaderGate`]: the gate's rules applied to a
//! request, so that a program using this crate cannot forget one (checking the gate right
//! before the request, bounding it by the lease, and telling an answered request from one
//! that may still land).

use std::future::Future;
use std::time::Duration;

use crate::{LeaderGate, TermId};

/// This replica may not write now: it does not hold the Lease, its gate stayed closed for
/// the whole wait, the term the write was started in has ended, or it is shutting down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica is not the leader")]
pub struct NotLeader;

/// How a write waits for the gate and how long it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteBounds {
    /// How long a write waits for a closed gate to reopen (a failed renewal being retried)
    /// before it fails as [`NotLeader`].
    pub gate_wait: Duration,
    /// Upper bound for one write, whatever the lease allows: a connection that stops
    /// answering is a failure, not a caller stuck for the client's read timeout.
    pub timeout: Duration,
}

impl LeaderGate {
    /// Runs one write to the API, if and while this replica may write: the gate is checked
    /// right before the request goes out (waiting up to `bounds.gate_wait` while a renewal
    /// is retried), the request is abandoned before another replica could take the Lease
    /// over, and it counts as in flight until it is answered or abandoned, so that the Lease
    /// is released only after it (or the write grace after it was abandoned).
    ///
    /// A request abandoned at its budget comes back as a timed-out `kube::Error::Service`.
    pub async fn write<T>(
        &self,
        bounds: WriteBounds,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>, NotLeader> {
        self.write_in(None, bounds, request).await
    }

    /// [`LeaderGate::write`] of a write started in `term` (`None`: in whichever term is
    /// current): refused once that term has ended ([`LeaderGate::current_term`]).
    pub async fn write_in<T>(
        &self,
        term: Option<TermId>,
        bounds: WriteBounds,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<kube::Result<T>, NotLeader> {
        if !self.wait_leading_in(term, bounds.gate_wait).await {
            return Err(NotLeader);
        }
        let write = self.admit_in(term, bounds.timeout).ok_or(NotLeader)?;
        let budget = write.budget();
        match tokio::time::timeout(budget, request).await {
            Ok(answer) => {
                if answered_by_the_server(&answer) {
                    write.answered();
                }
                // Else dropped unanswered: a request whose connection failed may still be
                // applied, like one that timed out.
                Ok(answer)
            }
            // `write` is dropped unanswered: abandoned now.
            Err(_) => Ok(Err(kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {budget:?}"),
            ))))),
        }
    }
}

/// Whether a write's outcome came from the API server (nothing of it can land later), as
/// opposed to a transport failure after which the request may still be applied.
pub(crate) fn answered_by_the_server<T>(answer: &kube::Result<T>) -> bool {
    matches!(
        answer,
        Ok(_) | Err(kube::Error::Api(_) | kube::Error::SerdeError(_))
    )
}
