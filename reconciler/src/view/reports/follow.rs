//! Finding out whether the `openreports.io` CRDs are served, and following them as they
//! come and go: discovery (`GET /apis/openreports.io/v1alpha1`) at the start of each term
//! and every [`DETECT_INTERVAL`] after it. Discovery, not a watch on
//! CustomResourceDefinitions: every authenticated client may read discovery, while a CRD
//! watch would need read access to every CRD of the cluster; one small GET every 20 s costs
//! nothing next to the watches. When the CRDs appear, our reports are watched (label
//! selected) and every baseline is reconciled once, which writes them; when they go, the
//! watch stops and nothing is written.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use namespace_baseline_core::identity::managed_selector;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::cache::{ReportCache, ReportCacheWriter, report_cache};
use super::known::shown_event;
use super::object::{GROUP, PLURAL, VERSION};
use super::{OpenReport, Reports};
use crate::base::watch_errors::{Watch, WatchErrors, watch_events};
use crate::view::unseen_writes::UnseenWrites;

/// How often discovery is asked whether the CRDs are (still) served.
pub const DETECT_INTERVAL: Duration = Duration::from_secs(20);

/// Whether the API server serves `openreports.io/v1alpha1` `reports`; `None` when discovery
/// could not tell (the previous answer stands).
pub async fn served(client: &Client) -> Option<bool> {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => Some(
            list.resources
                .iter()
                .any(|resource| resource.name == PLURAL),
        ),
        Err(kube::Error::Api(status)) if status.code == 404 => Some(false),
        Err(error) => {
            debug!(%error, "OpenReports discovery failed: asking again later");
            None
        }
    }
}

/// The task that follows the CRDs for one term, and the stream that fires when they appear
/// (for `Controller::reconcile_all_on`). Off (`--openreports=false`): never fires, never
/// asks.
pub fn follow(
    client: Client,
    reports: Reports,
    unseen: UnseenWrites,
    errors: WatchErrors,
) -> (impl Future<Output = ()> + Send, mpsc::UnboundedReceiver<()>) {
    let (appeared, on_appearance) = mpsc::unbounded();
    let task = async move {
        if !reports.enabled() {
            return futures::future::pending().await;
        }
        let mut watching: Option<Watching> = None;
        loop {
            match (served(&client).await, &mut watching) {
                (Some(true), None) => {
                    info!("the openreports.io CRDs are served: writing Reports");
                    watching = Some(Watching::start(&client, &unseen, &errors));
                }
                (Some(false), Some(_)) => {
                    info!("the openreports.io CRDs are gone: no more Reports");
                    watching = None;
                    reports.set_cache(None, &unseen);
                }
                _ => {}
            }
            match &mut watching {
                Some(watch) if !watch.listed => {
                    let ready =
                        tokio::time::timeout(DETECT_INTERVAL, watch.cache.wait_until_listed())
                            .await;
                    if matches!(ready, Ok(Ok(()))) {
                        watch.listed = true;
                        reports.set_cache(Some(watch.cache.clone()), &unseen);
                        let _ = appeared.unbounded_send(());
                    } else {
                        warn!(
                            "the Reports are not listed yet (if this lasts, check the reconciler's ClusterRole for openreports.io reports)"
                        );
                    }
                }
                _ => tokio::time::sleep(DETECT_INTERVAL).await,
            }
        }
    };
    (task, on_appearance)
}

/// The watch on our reports, stopped when dropped.
struct Watching {
    cache: ReportCache,
    task: JoinHandle<()>,
    listed: bool,
}

impl Watching {
    fn start(client: &Client, unseen: &UnseenWrites, errors: &WatchErrors) -> Self {
        let (cache, writer) = report_cache();
        let task = tokio::spawn(watch(
            client.clone(),
            writer,
            unseen.clone(),
            errors.clone(),
        ));
        Self {
            cache,
            task,
            listed: false,
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Each Report the watch shows goes into the cache as what is known of it
/// ([`shown_event`]), and is dropped there.
async fn watch(
    client: Client,
    mut writer: ReportCacheWriter,
    unseen: UnseenWrites,
    errors: WatchErrors,
) {
    watch_events(
        watcher(
            Api::<OpenReport>::all(client),
            watcher::Config::default()
                .labels(&managed_selector())
                .any_semantic(),
        ),
        Watch::all("reports"),
        errors,
    )
    .map(shown_event)
    .for_each(|event| {
        writer.apply(&event);
        unseen.observe(&event);
        futures::future::ready(())
    })
    .await;
}

/// Runs `controller` with `follow` beside it, until the controller ends.
pub async fn alongside(follow: impl Future<Output = ()>, controller: impl Future<Output = ()>) {
    tokio::select! {
        () = controller => {}
        () = follow => {}
    }
}
