//! A real Prometheus beside the node test n7, watching the reconciler as a platform team's
//! would watch the chart: it scrapes the reconciler through the chart's PodMonitor (rendered by
//! helm, turned into the scrape job prometheus-operator generates for a PodMonitor: Kubernetes
//! pod discovery in its namespace, kept by its selector and its endpoint's port, with its path,
//! interval and timeout) and evaluates the chart's alert rules as `e2e-tests/alerts/render.sh`
//! renders them. What the alerts did is read from its API while the scenario runs.
//!
//! The Prometheus server is built from its Go module by `e2e-tests/alerts/build.sh`
//! (node-tests.sh exports its directory as `NSB_PROMETHEUS_DIR`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use namespace_baseline_cluster_tests::{free_port, repo_root, wait_until};
use serde_json::{Value, json};

/// Scrape and rule evaluation intervals: short, so that the alerts follow the reconciler
/// within a second or two.
const INTERVAL: &str = "1s";

pub(crate) struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// The rule file it evaluates.
    pub rules: String,
}

impl Prometheus {
    /// Starts Prometheus on `podmonitor` (the chart's PodMonitor as `helm template` printed
    /// it) and the chart's rules rendered with `rule_values` (helm arguments).
    pub(crate) fn start(podmonitor: &str, rule_values: &[String]) -> Self {
        let binary = Path::new(&std::env::var("NSB_PROMETHEUS_DIR").expect(
            "NSB_PROMETHEUS_DIR: the Prometheus build of e2e-tests/alerts/build.sh (node-tests.sh sets it)",
        ))
        .join("prometheus");
        let dir = std::env::temp_dir().join(format!("nsb-n7-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();

        let rules_file = dir.join("rules.yaml");
        let rendered = Command::new(repo_root().join("e2e-tests/alerts/render.sh"))
            .arg(&rules_file)
            .args(rule_values)
            .env("HELM", std::env::var("NSB_HELM_BIN").expect("NSB_HELM_BIN"))
            .output()
            .expect("running e2e-tests/alerts/render.sh");
        assert!(
            rendered.status.success(),
            "render.sh failed: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let rules = std::fs::read_to_string(&rules_file).unwrap();

        let config = json!({
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "rule_files": [rules_file],
            "scrape_configs": [scrape_job(podmonitor)],
        });
        let config_file = dir.join("prometheus.yml");
        // YAML is a superset of JSON.
        std::fs::write(&config_file, serde_json::to_string_pretty(&config).unwrap()).unwrap();

        let port = free_port().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", binary.display()));
        Self {
            child,
            port,
            dir,
            rules,
        }
    }

    /// The `data` of an API answer.
    fn api(&self, path: &str) -> anyhow::Result<Value> {
        api(self.port, path)
    }

    /// Waits until every target of the job is up (scraped); how long that took.
    pub(crate) async fn wait_scraping(&self, timeout: Duration) -> Duration {
        let (_, took) = wait_until("Prometheus scraping the reconciler", timeout, || async {
            let targets = self.api("/api/v1/targets?state=active")?;
            let active = targets["activeTargets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let up = !active.is_empty() && active.iter().all(|target| target["health"] == "up");
            if !up {
                anyhow::bail!("targets: {active:?}");
            }
            Ok(Some(()))
        })
        .await
        .unwrap_or_else(|error| panic!("{error:#}; its log:\n{}", self.log()));
        took
    }

    /// The metric names it holds (every series it scraped).
    pub(crate) fn metric_names(&self) -> BTreeSet<String> {
        self.api("/api/v1/label/__name__/values")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect()
    }

    /// Watches its alerts (every 100 ms) until the returned watch is stopped.
    pub(crate) fn watch_alerts(&self) -> AlertWatch {
        AlertWatch::start(self.port)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "!! n7: Prometheus's configuration, rules and log kept in {}",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The `data` of a GET of Prometheus's API on localhost. HTTP/1.0, so that its answer comes
/// whole, never in chunks (Go's server chunks an HTTP/1.1 answer of unknown length).
fn api(port: u16, path: &str) -> anyhow::Result<Value> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("GET {path}: no header end in {response:?}"))?;
    anyhow::ensure!(
        head.split_whitespace().nth(1) == Some("200"),
        "GET {path}: {head} {body}"
    );
    let answer: Value = serde_json::from_str(body)?;
    Ok(answer["data"].clone())
}

/// The scrape job prometheus-operator generates for the PodMonitor's (only) endpoint. Fields
/// it does not translate fail here, so that a PodMonitor grown in the chart is not watched
/// differently than it would be.
fn scrape_job(podmonitor: &str) -> Value {
    let documents =
        namespace_baseline_testkit::manifests::parse(podmonitor, Path::new("helm template"))
            .unwrap();
    let [document] = documents.as_slice() else {
        panic!("one PodMonitor expected, got:\n{podmonitor}");
    };
    let monitor = &document.object;
    assert_eq!(monitor["kind"], "PodMonitor", "{podmonitor}");
    let name = monitor["metadata"]["name"].as_str().unwrap();
    let namespace = monitor["metadata"]["namespace"].as_str().unwrap();
    let spec = monitor["spec"].as_object().unwrap();
    let known = |object: &serde_json::Map<String, Value>, fields: &[&str]| {
        for field in object.keys() {
            assert!(
                fields.contains(&field.as_str()),
                "the PodMonitor's {field} is not translated into the scrape job: {podmonitor}"
            );
        }
    };
    known(spec, &["selector", "podMetricsEndpoints"]);
    let selector = spec["selector"].as_object().unwrap();
    known(selector, &["matchLabels"]);
    let endpoints = spec["podMetricsEndpoints"].as_array().unwrap();
    let [endpoint] = endpoints.as_slice() else {
        panic!("one endpoint expected: {podmonitor}");
    };
    let endpoint = endpoint.as_object().unwrap();
    known(endpoint, &["port", "path", "interval", "scrapeTimeout"]);

    let mut relabel = vec![
        json!({"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}),
        json!({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"}),
    ];
    for (label, value) in selector["matchLabels"].as_object().unwrap() {
        let label = sanitized(label);
        relabel.push(json!({
            "action": "keep",
            "source_labels": [format!("__meta_kubernetes_pod_label_{label}"), format!("__meta_kubernetes_pod_labelpresent_{label}")],
            "regex": format!("({});true", value.as_str().unwrap()),
        }));
    }
    let port = endpoint["port"].as_str().unwrap();
    relabel.extend([
        json!({"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port}),
        json!({"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"}),
        json!({"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"}),
        json!({"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}),
        json!({"target_label": "job", "replacement": format!("{namespace}/{name}")}),
        json!({"target_label": "endpoint", "replacement": port}),
    ]);
    json!({
        "job_name": format!("podMonitor/{namespace}/{name}/0"),
        "honor_labels": false,
        "metrics_path": endpoint["path"],
        "scrape_interval": endpoint["interval"],
        "scrape_timeout": endpoint["scrapeTimeout"],
        "kubernetes_sd_configs": [{
            "role": "pod",
            "kubeconfig_file": std::env::var("TEST_KUBECONFIG").expect("TEST_KUBECONFIG"),
            "namespaces": {"names": [namespace]},
        }],
        "relabel_configs": relabel,
    })
}

/// A Kubernetes label name as Prometheus's discovery spells it in a meta label.
fn sanitized(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// One alert as the API lists it: its name, the labels that tell it apart, its state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Alert {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub state: String,
}

/// What the alerts were at one moment, when they changed.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub at: Instant,
    pub wall: SystemTime,
    pub alerts: BTreeSet<Alert>,
}

/// A thread polling `/api/v1/alerts`, keeping every change.
pub(crate) struct AlertWatch {
    stop: Arc<AtomicBool>,
    changes: Arc<Mutex<Vec<Change>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AlertWatch {
    fn start(port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(Mutex::new(Vec::<Change>::new()));
        let thread = std::thread::spawn({
            let (stop, changes) = (stop.clone(), changes.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(data) = api(port, "/api/v1/alerts") {
                        let alerts: BTreeSet<Alert> = data["alerts"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .iter()
                            .map(|alert| {
                                let labels: BTreeMap<String, String> = alert["labels"]
                                    .as_object()
                                    .unwrap()
                                    .iter()
                                    .filter(|(name, _)| *name != "alertname")
                                    .map(|(name, value)| {
                                        (name.clone(), value.as_str().unwrap_or("").to_owned())
                                    })
                                    .collect();
                                Alert {
                                    name: alert["labels"]["alertname"].as_str().unwrap().to_owned(),
                                    labels,
                                    state: alert["state"].as_str().unwrap().to_owned(),
                                }
                            })
                            .collect();
                        let mut changes = changes.lock().unwrap();
                        if changes.last().is_none_or(|last| last.alerts != alerts) {
                            changes.push(Change {
                                at: Instant::now(),
                                wall: SystemTime::now(),
                                alerts,
                            });
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Self {
            stop,
            changes,
            thread: Some(thread),
        }
    }

    /// The changes so far.
    pub(crate) fn changes(&self) -> Vec<Change> {
        self.changes.lock().unwrap().clone()
    }

    /// When the alert `name` with `label`=`value` was first seen in `state` at or after
    /// `since`, and, for "inactive", first no longer listed.
    pub(crate) fn first(
        &self,
        name: &str,
        (label, value): (&str, &str),
        state: &str,
        since: Instant,
    ) -> Option<Instant> {
        self.changes()
            .into_iter()
            .filter(|change| change.at >= since)
            .find(|change| {
                let listed = change.alerts.iter().find(|alert| {
                    alert.name == name && alert.labels.get(label).map(String::as_str) == Some(value)
                });
                match listed {
                    Some(alert) => alert.state == state,
                    None => state == "inactive",
                }
            })
            .map(|change| change.at)
    }
}

impl Drop for AlertWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Prometheus {
    /// The `namespace_baseline_*` metrics its rules read.
    pub(crate) fn rule_metric_names(&self) -> BTreeSet<String> {
        const PREFIX: &str = "namespace_baseline_";
        let mut names = BTreeSet::new();
        let mut rest = self.rules.as_str();
        while let Some(at) = rest.find(PREFIX) {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            names.insert(name);
        }
        names
    }
}
