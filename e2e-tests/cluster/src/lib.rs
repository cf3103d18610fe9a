//! Harness for the cluster end-to-end tests: a real kube-apiserver (started by
//! `e2e-tests/cluster-tests.sh`, or any cluster given by `TEST_KUBECONFIG`), the generated CRD
//! and the RBAC of `deploy/`, and the reconciler binary run as its own ServiceAccount.
//!
//! Isolation: every reconciler acts on every NamespaceBaseline, so the tests run one at a
//! time (`--test-threads=1`), each starts from a cluster without baselines
//! ([`Cluster::connect`] removes them) and uses names unique to the run (namespaces cannot be
//! deleted without a controller-manager). Each test starts its own reconciler process(es) and
//! kills them when they go out of scope.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use namespace_baseline_core::identity::{self, RECONCILER_NAMESPACE, managed_selector};
use namespace_baseline_core::spec::{NamespaceBaseline, NamespaceBaselineStatus};
use namespace_baseline_testkit::apply::{Applier, wait_established};
use namespace_baseline_testkit::{kubeconfig, namespaces};
// What the tests, the bench and the soak use of the test kit, under the names they have
// always imported from here.
pub use namespace_baseline_testkit::audit::{
    Audit, AuditEvent, AuditMark, AuditUser, ENV_AUDIT_LOG, ENV_SKIP_AUDIT, ObjectRef,
    ResponseStatus, forbidden, tally,
};
pub use namespace_baseline_testkit::kubeconfig::Endpoint;
pub use namespace_baseline_testkit::manifests::read_yaml_documents;
pub use namespace_baseline_testkit::process::{Metrics, free_port};
use namespace_baseline_testkit::process::{ReconcilerProcess, Spawn};
pub use namespace_baseline_testkit::{http_get, wait_until, wait_until_every};
use serde_json::{Value, json};

pub use namespace_baseline_core::identity::{FIELD_MANAGER, deny_all_policy_name, dns_policy_name};

pub mod admission;
pub mod faults;
pub mod flags;
pub mod in_process;
pub mod kubewarden_stack;
pub mod leadership;
pub mod repairs;
pub mod window;

pub use window::Window;

/// The admin kubeconfig of the cluster under test.
pub const ENV_KUBECONFIG: &str = "TEST_KUBECONFIG";
/// The reconciler binary (`cargo build -p namespace-baseline-reconciler`).
pub const ENV_RECONCILER_BIN: &str = "NSB_RECONCILER_BIN";

/// The field manager the harness applies its own objects with.
pub const TEST_MANAGER: &str = "nsb-e2e";
/// The label key the tests' namespaces carry; each scenario has its own value.
pub const SCENARIO_LABEL: &str = "e2e.hedronite.io/scenario";

/// The Service a default DNS door is checked against.
pub const DNS_SERVICE: &str = "kube-dns";

/// The stand-in cluster DNS objects of [`Cluster`]'s install (see `install_dns_objects`).
pub fn dns_objects() -> Vec<Value> {
    let labels = json!({"app.kubernetes.io/managed-by": TEST_MANAGER});
    vec![
        // Without a controller-manager nothing creates it, and a pod needs it.
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": "kube-system"},
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": DNS_SERVICE, "namespace": "kube-system", "labels": labels},
            "spec": {"selector": {"k8s-app": "kube-dns"}, "ports": [
                {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 53},
                {"name": "dns-tcp", "protocol": "TCP", "port": 53, "targetPort": 53}]},
        }),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "coredns-stand-in", "namespace": "kube-system",
                         "labels": {"k8s-app": "kube-dns", "app.kubernetes.io/managed-by": TEST_MANAGER}},
            // Never scheduled (no node): the object only carries the labels an endpoint's
            // pod has.
            "spec": {"nodeName": "no-such-node", "containers": [{"name": "coredns", "image": "coredns/coredns:stand-in"}]},
        }),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kube-dns-stand-in", "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": DNS_SERVICE, "app.kubernetes.io/managed-by": TEST_MANAGER}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.53"], "conditions": {"ready": true},
                           "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": "coredns-stand-in"}}],
            "ports": [{"name": "dns", "protocol": "UDP", "port": 53}, {"name": "dns-tcp", "protocol": "TCP", "port": 53}],
        }),
    ]
}

/// Repository root (the workspace), for `deploy/`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A short identifier of this test run, so names never collide with earlier runs on the same
/// API server (namespaces are never really deleted without a controller-manager).
fn run_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // Seconds in base 36 (7 characters for the next decades), then 2 of the pid.
        let mut n = now.as_secs();
        let mut text = String::new();
        while n > 0 {
            let digit = u32::try_from(n % 36).unwrap_or(0);
            text.insert(0, char::from_digit(digit, 36).unwrap_or('0'));
            n /= 36;
        }
        format!("{text}{:02x}", std::process::id() % 256)
    })
    .clone()
}

/// The cluster under test, with the CRD and the reconciler's RBAC applied.
pub struct Cluster {
    pub admin: Client,
    admin_kubeconfig: Kubeconfig,
    /// Applies and creates objects as admin, under [`TEST_MANAGER`].
    applier: Applier,
    pub audit: Audit,
    run: String,
    work_dir: PathBuf,
}

impl Cluster {
    /// Connects as admin, applies `deploy/crd.yaml` and `deploy/rbac.yaml` (server-side apply),
    /// and removes every NamespaceBaseline, and the admission policy's webhook configuration
    /// ([`admission`]), left by an earlier test.
    ///
    /// Panics when `TEST_KUBECONFIG` is not set: a missing control plane must never look like
    /// a pass.
    pub async fn connect() -> Result<Self> {
        let Some(path) = std::env::var_os(ENV_KUBECONFIG) else {
            panic!(
                "no control plane: run `make cluster-tests` (or e2e-tests/cluster-tests.sh) or set {ENV_KUBECONFIG}"
            );
        };
        let admin_kubeconfig = Kubeconfig::read_from(&path)
            .with_context(|| format!("reading {ENV_KUBECONFIG}={}", path.to_string_lossy()))?;
        let admin = client_from(admin_kubeconfig.clone()).await?;
        let run = run_id();
        let work_dir = std::env::temp_dir().join(format!("nsb-cluster-tests-{run}"));
        std::fs::create_dir_all(&work_dir)?;
        // The API server's default field validation (a warning), as these tests always had.
        let applier = Applier {
            strict: false,
            ..Applier::new(admin.clone(), TEST_MANAGER)
        };
        let cluster = Self {
            admin,
            admin_kubeconfig,
            applier,
            audit: Audit::from_env(),
            run,
            work_dir,
        };
        cluster.install().await?;
        cluster.remove_leftover_policies().await?;
        cluster.remove_leftover_admission_chain().await?;
        cluster.remove_all_baselines().await?;
        Ok(cluster)
    }

    /// Names unique to this run and `scenario`.
    pub fn scenario(&self, scenario: &str) -> Scenario {
        Scenario {
            name: format!("e2e-{}-{scenario}", self.run),
            label_value: format!("{}-{scenario}", self.run),
            admin: self.admin.clone(),
        }
    }

    async fn install(&self) -> Result<()> {
        let root = repo_root();
        for object in read_yaml_documents(&root.join("deploy/crd.yaml"))? {
            self.apply(&object)
                .await
                .context("applying deploy/crd.yaml")?;
        }
        wait_established(
            &self.admin,
            &format!("namespacebaselines.{}", identity::GROUP),
        )
        .await?;
        // The namespace may or may not be part of rbac.yaml: make sure it exists first.
        let namespaces: Api<Namespace> = Api::all(self.admin.clone());
        namespaces
            .patch(
                RECONCILER_NAMESPACE,
                &PatchParams::apply(TEST_MANAGER),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": RECONCILER_NAMESPACE}
                })),
            )
            .await
            .context("creating the reconciler's namespace")?;
        for object in read_yaml_documents(&root.join("deploy/rbac.yaml"))? {
            self.apply(&object)
                .await
                .context("applying deploy/rbac.yaml")?;
        }
        self.install_dns_objects().await
    }

    /// A control plane without a node has no cluster DNS: give it the objects a CoreDNS
    /// Deployment would leave (the `kube-system/kube-dns` Service, one `k8s-app=kube-dns` pod
    /// and a ready EndpointSlice naming it on UDP and TCP 53), so that a default DNS door is
    /// checked against a DNS that fits it. A cluster with its own `kube-dns` keeps it.
    async fn install_dns_objects(&self) -> Result<()> {
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(self.admin.clone(), "kube-system");
        if let Some(existing) = services.get_opt(DNS_SERVICE).await? {
            let ours = existing.metadata.labels.is_some_and(|labels| {
                labels
                    .get("app.kubernetes.io/managed-by")
                    .map(String::as_str)
                    == Some(TEST_MANAGER)
            });
            if !ours {
                return Ok(());
            }
        }
        for object in dns_objects() {
            self.apply(&object).await.with_context(|| {
                format!("applying the stand-in DNS objects ({})", object["kind"])
            })?;
        }
        Ok(())
    }

    /// Server-side applies one object given as JSON (any kind, discovered), forced, as
    /// [`TEST_MANAGER`].
    pub async fn apply(&self, object: &Value) -> Result<DynamicObject> {
        self.applier.apply_object(object).await
    }

    /// Creates one object given as JSON (any kind): the API server's verdict, unchanged (a
    /// discovery failure comes back as `kube::Error::Service`).
    pub async fn create(&self, object: &Value) -> Result<DynamicObject, kube::Error> {
        self.applier.create(object).await
    }

    /// Deletes every NamespaceBaseline, removing finalizers no reconciler is left to honour.
    pub async fn remove_all_baselines(&self) -> Result<()> {
        let api = self.baselines();
        for baseline in api.list(&ListParams::default()).await? {
            let name = baseline.name_any();
            if !baseline.finalizers().is_empty() {
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await?;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        wait_until("all baselines to be gone", Duration::from_secs(10), || {
            let api = api.clone();
            async move {
                Ok(api
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            }
        })
        .await?;
        Ok(())
    }

    pub fn baselines(&self) -> Api<NamespaceBaseline> {
        Api::all(self.admin.clone())
    }

    /// The notes of the Events about `baseline` with `reason` (the reconciler records them
    /// in `default`, as the API server does for cluster-scoped objects).
    pub async fn events(&self, baseline: &str, reason: &str) -> Result<Vec<String>> {
        let api: Api<Event> = Api::namespaced(self.admin.clone(), "default");
        let list = api
            .list(&ListParams::default().fields(&format!("regarding.name={baseline}")))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some(reason))
            .filter_map(|event| event.note)
            .collect())
    }

    /// Waits for the baseline's condition `type_` to have `status` (and `reason`, if given):
    /// its reason, its message and how long it took. A timeout's error shows the status then.
    pub async fn wait_condition(
        &self,
        baseline: &str,
        type_: &str,
        status: &str,
        reason: Option<&str>,
        timeout: Duration,
    ) -> Result<(String, String, Duration)> {
        let api = self.baselines();
        let result = wait_until(
            &format!("{baseline} {type_}={status} (reason {reason:?})"),
            timeout,
            || {
                let api = api.clone();
                async move {
                    let baseline = api.get(baseline).await?;
                    Ok(baseline
                        .status
                        .as_ref()
                        .and_then(|s| condition(s, type_))
                        .filter(|(s, r, _)| s == status && reason.is_none_or(|reason| r == reason))
                        .map(|(_, r, m)| (r, m)))
                }
            },
        )
        .await;
        match result {
            Ok(((reason, message), took)) => Ok((reason, message, took)),
            Err(error) => {
                let now = api.get(baseline).await.map(|b| b.status);
                Err(error.context(format!("status now: {now:?}")))
            }
        }
    }

    /// The baseline's status as the API server has it now.
    pub async fn status(&self, baseline: &str) -> Result<NamespaceBaselineStatus> {
        self.baselines()
            .get(baseline)
            .await?
            .status
            .with_context(|| format!("NamespaceBaseline {baseline} has no status"))
    }

    /// A kubeconfig holding a fresh TokenRequest token of the reconciler's ServiceAccount.
    pub async fn reconciler_kubeconfig(&self) -> Result<PathBuf> {
        self.reconciler_kubeconfig_at(None, "reconciler").await
    }

    /// Where the admin kubeconfig reaches the API server: its URL and CA (PEM), e.g. for a
    /// proxy to forward to.
    pub fn api_server(&self) -> Result<Endpoint> {
        kubeconfig::endpoint(&self.admin_kubeconfig).context("admin kubeconfig")
    }

    fn admin_cluster(&self) -> Result<&kube::config::Cluster> {
        kubeconfig::current_cluster(&self.admin_kubeconfig).context("admin kubeconfig")
    }

    /// Like [`Self::reconciler_kubeconfig`], reaching the API server at `endpoint` (e.g. a
    /// proxy) instead of where the admin kubeconfig does; written to `<stem>.kubeconfig`.
    pub async fn reconciler_kubeconfig_at(
        &self,
        endpoint: Option<&Endpoint>,
        stem: &str,
    ) -> Result<PathBuf> {
        let cluster = match endpoint {
            None => serde_json::to_value(self.admin_cluster()?)?,
            Some(endpoint) => {
                let ca = self.work_dir.join(format!("{stem}.ca.crt"));
                std::fs::write(&ca, &endpoint.ca_pem)?;
                json!({"server": endpoint.server, "certificate-authority": ca})
            }
        };
        let path = self.work_dir.join(format!("{stem}.kubeconfig"));
        kubeconfig::write_reconciler_kubeconfig(&self.admin, cluster, &path).await?;
        Ok(path)
    }

    /// A client authenticated as the reconciler's ServiceAccount.
    pub async fn reconciler_client(&self) -> Result<Client> {
        let path = self.reconciler_kubeconfig().await?;
        client_from(Kubeconfig::read_from(path)?).await
    }

    /// Starts the reconciler binary as its ServiceAccount with `args` after `run` (a free
    /// `--listen` port is added), logs to a file printed if the test fails.
    pub async fn start_reconciler(&self, instance: &str, args: &[&str]) -> Result<Reconciler> {
        self.start_reconciler_at(instance, args, None).await
    }

    /// [`Self::start_reconciler`], the reconciler reaching the API server at `endpoint`
    /// (e.g. a fault-injecting proxy) when given.
    pub async fn start_reconciler_at(
        &self,
        instance: &str,
        args: &[&str],
        endpoint: Option<&Endpoint>,
    ) -> Result<Reconciler> {
        let reconciler = self
            .spawn_reconciler(
                instance,
                args,
                endpoint,
                "info,namespace_baseline_reconciler=debug,namespace_baseline_leader=debug",
            )
            .await?;
        let port = reconciler.port;
        // Ready: leadership known and, when leading, caches synced (its initial LISTs done).
        wait_until(
            "the reconciler to be ready (/readyz)",
            Duration::from_secs(30),
            || {
                let result = reconciler
                    .check_alive()
                    .and_then(|()| http_get(port, "/readyz"));
                async move { Ok(result.ok().filter(|(code, _)| *code == 200).map(|_| ())) }
            },
        )
        .await
        .with_context(|| reconciler.log_tail(40))?;
        Ok(reconciler)
    }

    /// Spawns the reconciler binary as its ServiceAccount with `args` after `run` and a free
    /// `--listen` port, without waiting for it; `RUST_LOG` is `NSB_RECONCILER_LOG` or
    /// `default_log`. Its log goes to a file printed if the test fails.
    pub async fn spawn_reconciler(
        &self,
        instance: &str,
        args: &[&str],
        endpoint: Option<&Endpoint>,
        default_log: &str,
    ) -> Result<Reconciler> {
        let binary = std::env::var_os(ENV_RECONCILER_BIN).with_context(|| {
            format!("{ENV_RECONCILER_BIN} is not set: build the reconciler (`cargo build -p namespace-baseline-reconciler`) and point {ENV_RECONCILER_BIN} at it (e2e-tests/cluster-tests.sh does both)")
        })?;
        let kubeconfig = match endpoint {
            None => self.reconciler_kubeconfig().await?,
            Some(endpoint) => {
                self.reconciler_kubeconfig_at(Some(endpoint), &format!("reconciler-{instance}"))
                    .await?
            }
        };
        let rust_log =
            std::env::var("NSB_RECONCILER_LOG").unwrap_or_else(|_| default_log.to_owned());
        let reconciler = Reconciler(ReconcilerProcess::spawn(Spawn {
            binary: Path::new(&binary),
            kubeconfig: &kubeconfig,
            instance,
            args,
            log: self.work_dir.join(format!("reconciler-{instance}.log")),
            rust_log: &rust_log,
        })?);
        eprintln!(
            "started reconciler {instance} (pid {}, port {}, log {})",
            reconciler.pid(),
            reconciler.port,
            reconciler.log.display()
        );
        Ok(reconciler)
    }
}

async fn client_from(kubeconfig: Kubeconfig) -> Result<Client> {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(namespace_baseline_reconciler::runtime::api_client::client(
        config,
    )?)
}

/// One scenario's names: its baseline names, namespaces and label.
pub struct Scenario {
    /// Prefix of every name in the scenario (also the first baseline's name).
    pub name: String,
    /// The value of [`SCENARIO_LABEL`] that puts namespaces behind this scenario's baselines.
    pub label_value: String,
    admin: Client,
}

impl Scenario {
    /// `namespaceLabel` selecting this scenario's walled namespaces.
    pub fn selector(&self) -> String {
        format!("{SCENARIO_LABEL}={}", self.label_value)
    }

    /// A namespace name in this scenario.
    pub fn namespace(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.name)
    }

    /// Creates namespaces with the given labels, 10 at a time.
    pub async fn create_namespaces(
        &self,
        names: &[String],
        labels: &BTreeMap<String, String>,
    ) -> Result<()> {
        namespaces::create(&self.admin, names, labels, 10).await
    }

    /// The labels that put a namespace behind this scenario's baselines.
    pub fn walled_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(SCENARIO_LABEL.to_owned(), self.label_value.clone())])
    }

    /// Labels of the same key but another value: not walled.
    pub fn other_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(
            SCENARIO_LABEL.to_owned(),
            format!("{}-not", self.label_value),
        )])
    }

    /// Labels or unlabels a namespace (merge patch; `None` removes the label).
    pub async fn set_namespace_label(&self, namespace: &str, value: Option<&str>) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        api.patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SCENARIO_LABEL: value}}})),
        )
        .await?;
        Ok(())
    }

    /// Best-effort cleanup of the scenario's namespaces (they stay Terminating without a
    /// namespace controller, which is harmless: their names are unique to the run).
    pub async fn delete_namespaces(&self, names: &[String]) {
        let api: Api<Namespace> = Api::all(self.admin.clone());
        for name in names {
            let _ = api.delete(name, &DeleteParams::default()).await;
        }
    }
}

/// A managed NetworkPolicy, or `None` when absent.
pub async fn get_policy(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<NetworkPolicy>> {
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?)
}

/// Waits until the NetworkPolicy `name` exists again with a uid other than `old_uid` (it was
/// deleted and something re-created it): the time it took.
pub async fn wait_recreated(
    policies: &Api<NetworkPolicy>,
    name: &str,
    old_uid: Option<String>,
    timeout: Duration,
) -> Result<Duration> {
    let what = format!("the NetworkPolicy {name} re-created");
    let (_, took) = wait_until(&what, timeout, || {
        let old_uid = old_uid.clone();
        async move {
            Ok(policies
                .get_opt(name)
                .await?
                .filter(|policy| policy.uid() != old_uid)
                .map(|_| ()))
        }
    })
    .await?;
    Ok(took)
}

/// Nearest-rank percentile (`p` in 0..=100) of samples sorted ascending; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Every NetworkPolicy carrying the managed-by label in `namespace`.
pub async fn managed_policies(client: &Client, namespace: &str) -> Result<Vec<NetworkPolicy>> {
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default().labels(&managed_selector()))
        .await?
        .items)
}

/// The spec of a policy as JSON (what the API server returned, nothing normalised).
pub fn spec_json(policy: &NetworkPolicy) -> Value {
    serde_json::to_value(&policy.spec).unwrap_or(Value::Null)
}

/// The deny-all spec, written out independently of the core: what the API server must hold.
pub fn expected_deny_all_spec() -> Value {
    json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
}

/// The default DNS door spec, written out independently of the core.
pub fn expected_dns_spec() -> Value {
    json!({
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}
            }],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
        }]
    })
}

/// The labels a managed policy of `baseline` must carry.
pub fn expected_labels(baseline: &str) -> BTreeMap<String, String> {
    identity::managed_labels(baseline)
}

/// Whether `policy` is exactly the wall's `expected` spec with the managed labels of
/// `baseline`; `Err` says how it differs.
pub fn check_policy(policy: &NetworkPolicy, baseline: &str, expected: &Value) -> Result<()> {
    let actual = spec_json(policy);
    ensure!(
        &actual == expected,
        "{}/{}: spec {actual} differs from {expected}",
        policy.namespace().unwrap_or_default(),
        policy.name_any()
    );
    let labels = policy.labels();
    for (key, value) in expected_labels(baseline) {
        ensure!(
            labels.get(&key) == Some(&value),
            "{}: label {key}={value} missing",
            policy.name_any()
        );
    }
    Ok(())
}

/// A baseline's Ready condition: (status, reason, message).
pub fn condition(
    status: &NamespaceBaselineStatus,
    type_: &str,
) -> Option<(String, String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A status as observed, with the generation of the object that carried it.
type Observed = (Option<i64>, NamespaceBaselineStatus);

/// Every status a baseline went through, recorded from a watch (a status that lasts a few
/// milliseconds, like `objectsApplied: 100` before the next reconcile resets it, is seen).
pub struct StatusLog {
    seen: Arc<Mutex<Vec<Observed>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusLog {
    pub fn watch(cluster: &Cluster, baseline: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let api = cluster.baselines();
        let config = watcher::Config::default().fields(&format!("metadata.name={baseline}"));
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) = event
                    && let Some(status) = object.status
                {
                    sink.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((object.metadata.generation, status));
                }
            }
        });
        Self { seen, task }
    }

    /// The first recorded status satisfying `predicate` (given the generation).
    pub fn find(
        &self,
        predicate: impl Fn(Option<i64>, &NamespaceBaselineStatus) -> bool,
    ) -> Option<NamespaceBaselineStatus> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(generation, status)| predicate(*generation, status))
            .map(|(_, status)| status.clone())
    }

    pub fn history(&self) -> Vec<NamespaceBaselineStatus> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(_, status)| status.clone())
            .collect()
    }
}

impl Drop for StatusLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A reconciler process; killed (SIGKILL) when dropped, its log printed if the test failed.
pub struct Reconciler(ReconcilerProcess);

/// The process's probes, logs and `kill` ([`ReconcilerProcess`]): `metric` errs on an absent
/// series; `counter_or_zero` is for a labelled counter that may not have counted yet.
impl std::ops::Deref for Reconciler {
    type Target = ReconcilerProcess;

    fn deref(&self) -> &ReconcilerProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Reconciler {
    fn deref_mut(&mut self) -> &mut ReconcilerProcess {
        &mut self.0
    }
}

impl Reconciler {
    /// SIGTERM, then waits up to 25 s for a clean exit; returns the exit status.
    pub async fn stop(&mut self) -> Result<std::process::ExitStatus> {
        Ok(self.0.stop(Duration::from_secs(25)).await?.0)
    }
}

/// The reconciler ServiceAccount's username.
pub fn reconciler_username() -> String {
    identity::reconciler_username()
}

/// Asks the API server whether the client's identity may do `verb` on `resource`.
pub async fn can_i(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> Result<bool> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource: subresource.map(str::to_owned),
                namespace: namespace.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

/// The `(namespace, name)` of every managed policy of `baseline` (one cluster-wide list).
pub async fn wall_of(client: &Client, baseline: &str) -> Result<BTreeSet<(String, String)>> {
    let api: Api<NetworkPolicy> = Api::all(client.clone());
    let selector = format!(
        "{},{}={}",
        managed_selector(),
        identity::BASELINE_LABEL,
        identity::baseline_label_value(baseline)
    );
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .map(|policy| (policy.namespace().unwrap_or_default(), policy.name_any()))
        .collect())
}
