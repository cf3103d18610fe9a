//! Watches, as the admin, the managed NetworkPolicies and the NamespaceBaselines, stamping
//! every event with the instant the bench saw it: latencies are measured against these
//! stamps (a client's view: the object exists once a watcher is told so), not by polling.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use namespace_baseline_core::identity::{BASELINE_LABEL, managed_selector};
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};

pub type Key = (String, String);

#[derive(Default)]
struct PolicyState {
    /// Per policy: (seen at, present after the event).
    history: HashMap<Key, Vec<(Instant, bool)>>,
    /// Per baseline label value: the policies present now.
    present: HashMap<String, HashSet<Key>>,
    /// Per baseline label value: when a policy was first and last seen created or changed.
    first_applied: HashMap<String, Instant>,
    last_applied: HashMap<String, Instant>,
    synced: bool,
}

/// Every managed NetworkPolicy event, stamped.
pub struct PolicyWatch {
    state: Arc<Mutex<PolicyState>>,
    task: tokio::task::JoinHandle<()>,
}

impl PolicyWatch {
    pub async fn start(client: Client) -> Result<Self> {
        let state = Arc::new(Mutex::new(PolicyState::default()));
        let sink = state.clone();
        let api: Api<NetworkPolicy> = Api::all(client);
        let config = watcher::Config::default().labels(&managed_selector());
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let now = Instant::now();
                let Ok(event) = event else { continue };
                let mut state = sink.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(policy) | watcher::Event::InitApply(policy) => {
                        state.record(&policy, now, true);
                    }
                    watcher::Event::Delete(policy) => state.record(&policy, now, false),
                    watcher::Event::InitDone => state.synced = true,
                    watcher::Event::Init => {}
                }
            }
        });
        let watch = Self { state, task };
        let started = Instant::now();
        while !watch.lock().synced {
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the policy watch did not sync within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(watch)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PolicyState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Policies carrying this baseline label value now.
    pub fn count(&self, label_value: &str) -> usize {
        self.lock().present.get(label_value).map_or(0, HashSet::len)
    }

    /// When a policy with this baseline label value was first seen created or changed.
    pub fn first_applied(&self, label_value: &str) -> Option<Instant> {
        self.lock().first_applied.get(label_value).copied()
    }

    /// When a policy with this baseline label value was last seen created or changed.
    pub fn last_applied(&self, label_value: &str) -> Option<Instant> {
        self.lock().last_applied.get(label_value).copied()
    }

    /// When the policy, deleted at or after `since`, was seen again.
    pub fn back_after(&self, key: &Key, since: Instant) -> Option<Instant> {
        let state = self.lock();
        let history = state.history.get(key)?;
        let gone = history
            .iter()
            .position(|(at, present)| *at >= since && !present)?;
        history[gone..]
            .iter()
            .find(|(_, present)| *present)
            .map(|(at, _)| *at)
    }

    /// When the policy was first seen present (created or changed) at or after `since`.
    pub fn applied_after(&self, key: &Key, since: Instant) -> Option<Instant> {
        let state = self.lock();
        state
            .history
            .get(key)?
            .iter()
            .find(|(at, present)| *at >= since && *present)
            .map(|(at, _)| *at)
    }
}

impl PolicyState {
    fn record(&mut self, policy: &NetworkPolicy, at: Instant, present: bool) {
        let key = (policy.namespace().unwrap_or_default(), policy.name_any());
        let label = policy
            .labels()
            .get(BASELINE_LABEL)
            .cloned()
            .unwrap_or_default();
        self.history
            .entry(key.clone())
            .or_default()
            .push((at, present));
        if present {
            // A policy relabelled to another baseline leaves its old set.
            for (other, keys) in &mut self.present {
                if *other != label {
                    keys.remove(&key);
                }
            }
            self.first_applied.entry(label.clone()).or_insert(at);
            self.last_applied.insert(label.clone(), at);
            self.present.entry(label).or_default().insert(key);
        } else {
            for keys in self.present.values_mut() {
                keys.remove(&key);
            }
        }
    }
}

impl Drop for PolicyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Observed = (Instant, Option<i64>, NamespaceBaselineStatus);

/// Every status of every NamespaceBaseline, stamped (an empty one before the first).
pub struct BaselineWatch {
    seen: Arc<Mutex<HashMap<String, Vec<Observed>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl BaselineWatch {
    pub fn start(client: Client) -> Self {
        let seen: Arc<Mutex<HashMap<String, Vec<Observed>>>> = Arc::default();
        let sink = seen.clone();
        let api: Api<NamespaceBaseline> = Api::all(client);
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let now = Instant::now();
                // A new baseline (no status yet) is recorded too: when it was seen.
                if let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event
                {
                    sink.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(object.name_any())
                        .or_default()
                        .push((
                            now,
                            object.metadata.generation,
                            object.status.clone().unwrap_or_default(),
                        ));
                }
            }
        });
        Self { seen, task }
    }

    /// The first status of `name` seen at or after `since` satisfying `predicate`.
    pub fn first_after(
        &self,
        name: &str,
        since: Instant,
        predicate: impl Fn(Option<i64>, &NamespaceBaselineStatus) -> bool,
    ) -> Option<(Instant, NamespaceBaselineStatus)> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)?
            .iter()
            .find(|(at, generation, status)| *at >= since && predicate(*generation, status))
            .map(|(at, _, status)| (*at, status.clone()))
    }
}

impl Drop for BaselineWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `Ready=True` for the generation the status was written for, with `namespaces` matched.
pub fn is_ready(
    generation: Option<i64>,
    status: &NamespaceBaselineStatus,
    namespaces: u32,
) -> bool {
    status.observed_generation == generation
        && status.namespaces == namespaces
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}
