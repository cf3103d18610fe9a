//! What the last probe round of each baseline found, shared between the driver (which
//! writes it) and the reconcile (which turns it into the `Enforced` condition), and the
//! baselines waiting for a round sooner than the period (spec changed, wall repaired).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::Notify;

use super::options::ProbeOptions;
use super::verdict::Verdict;

/// One baseline's last round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRound {
    pub verdict: Verdict,
    /// When the round ended.
    pub at: Time,
    /// The baseline's generation when the round started.
    pub generation: Option<i64>,
}

#[derive(Debug, Default)]
pub struct Results {
    enabled: AtomicBool,
    options: Mutex<Option<ProbeOptions>>,
    last: Mutex<HashMap<String, LastRound>>,
    requested: Mutex<BTreeSet<String>>,
    wake: Notify,
}

impl Results {
    /// The process's probe flags (`run`); the probe is on when they name an image.
    pub fn configure(&self, options: ProbeOptions) {
        *self.options.lock().unwrap_or_else(PoisonError::into_inner) = Some(options);
    }

    /// The flags, when the probe is on.
    pub fn options(&self) -> Option<ProbeOptions> {
        self.options
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .filter(ProbeOptions::enabled)
    }

    /// The probe runs in this process (`--probe-image`).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn record(&self, baseline: &str, outcome: LastRound) {
        self.lock_last().insert(baseline.to_owned(), outcome);
    }

    pub fn last(&self, baseline: &str) -> Option<LastRound> {
        self.lock_last().get(baseline).cloned()
    }

    /// Forgets the baselines not in `live` (deleted).
    pub fn retain(&self, live: &BTreeSet<String>) {
        self.lock_last().retain(|name, _| live.contains(name));
    }

    /// Asks for a round of `baseline` before the period is up.
    pub fn request(&self, baseline: &str) {
        self.requested
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(baseline.to_owned());
        self.wake.notify_one();
    }

    /// The baselines asked for since the last call.
    pub fn take_requested(&self) -> BTreeSet<String> {
        std::mem::take(
            &mut *self
                .requested
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Resolves at the next [`Results::request`] (or at once if one came since the last wait).
    pub async fn requested(&self) {
        self.wake.notified().await;
    }

    fn lock_last(&self) -> std::sync::MutexGuard<'_, HashMap<String, LastRound>> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
