//! Node test 7, `Enforced`: the chart's enforcement probe (probe pods of the reconciler image
//! in a canary namespace behind the wall and in an unwalled control namespace) says whether
//! the wall holds on packets, and notices when it stops holding:
//! - enforcer running: `Enforced=True WallHoldsOnPackets` within one probe period of Ready;
//! - paper wall: kube-router stopped and its iptables rules removed (the objects unchanged,
//!   the wire open: a positive control shows it): `False NotEnforced` within two periods,
//!   naming both directions; kube-router back: `True` again;
//! - DNS door broken on the wire while the objects look right: CoreDNS also served on 5353,
//!   and the node DNATs the kube-dns ClusterIP's port 53 to the CoreDNS pod's 5353 (as
//!   OpenShift's 5353 or a NodeLocal cache in iptables mode rewrite what the door sees):
//!   `False DNSBlocked`, while `DNSReachable` (which reads objects) says what it said before; the detour
//!   removed: `True` again.
//!
//! - the chart's alert: a real Prometheus scraping the reconciler through the chart's
//!   PodMonitor and evaluating the chart's rules (prometheus.rs) has
//!   `NamespaceBaselineNotEnforced` pending, then firing, while the wall is paper, and resolved
//!   once `Enforced` is True again; every metric the rules read is one it scraped.
//!
//! Every transition is printed with its time (FIGURE n7), and the probe's cost from the
//! reconciler's `probe round` log lines (pods, API requests, CPU and memory of a round).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use namespace_baseline_cluster_tests::{Cluster, condition, wait_until};
use namespace_baseline_core::identity::RECONCILER_NAMESPACE;
use serde_json::{Value, json};

use crate::chart::{self, set};
use crate::common::{self, figure, wait_ready};
use crate::pods::{Node, coredns_ip, no_labels, start_pod};
use crate::prometheus::{AlertWatch, Prometheus};
use crate::{assert_blocked, assert_passed, wait_wire};

/// The probe's period and listen window in this test (`--probe-interval`,
/// `--probe-listen-window`); the defaults are 5m and 20s.
const PERIOD: Duration = Duration::from_secs(30);
const WINDOW: &str = "16s";
const CONTROL_NAMESPACE: &str = "namespace-baseline-probe";
const DNS_NAME: &str = "kubernetes.default.svc.cluster.local";
const DETOUR_TABLE: &str = "nsb_dns_detour";
/// The alert that watches `Enforced`, and its `for:` here (the chart's default is 1m): long
/// enough to see it pending, short enough to keep the scenario's time.
const ALERT: &str = "NamespaceBaselineNotEnforced";
const ALERT_FOR: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread")]
async fn n7_enforced_on_packets_paper_wall_and_dns_detour() {
    let (cluster, names, _) = common::start("n7").await;
    let node = Node::from_env();
    let baseline = names.name.clone();
    let canary = names.namespace("canary");
    let walled_ns = names.namespace("walled");
    let open_ns = names.namespace("open");
    names
        .create_namespaces(std::slice::from_ref(&open_ns), &no_labels())
        .await
        .unwrap();
    names
        .create_namespaces(std::slice::from_ref(&walled_ns), &names.walled_labels())
        .await
        .unwrap();
    // Test pods beside the probe: the wire as the test itself sees it, for the positive
    // controls of each scenario (the probe pods have no tools).
    let walled = start_pod(&cluster.admin, &node, &walled_ns, "server").await;
    let open = start_pod(&cluster.admin, &node, &open_ns, "server").await;

    // --- the chart with the probe on, one canary for this scenario's baseline -------------
    let canaries = json!([{
        "baseline": baseline,
        "namespace": canary,
        "labels": names.walled_labels(),
    }])
    .to_string();
    let values = [
        set("reconciler.replicas", 1),
        set("reconciler.leaderElection", false),
        set("reconciler.logLevel", "info"),
        set("probe.enabled", true),
        set("probe.interval", format!("{}s", PERIOD.as_secs())),
        set("probe.listenWindow", WINDOW),
        set("probe.dnsName", DNS_NAME),
        // Only this scenario's baseline is probed: the cost below is one baseline's.
        set("probe.systemCanary", ""),
        ["--set-json".into(), format!("probe.canaries={canaries}")],
    ];
    let values = values.concat();
    let release = chart::install(&values).release;

    // --- 1. enforcer running: True within one period of Ready -----------------------------
    common::create_baseline(&cluster, &baseline, common::spec(&names)).await;
    let (_, ready_after) = wait_ready(&cluster, &baseline, 2, Duration::from_secs(60)).await;
    let mut watch = Transitions::new(&cluster, &baseline);
    let (held, message) = watch.until("True", "WallHoldsOnPackets", 3 * PERIOD).await;
    assert!(
        held <= PERIOD,
        "Enforced=True {held:?} after Ready, more than one probe period ({PERIOD:?})"
    );
    figure(
        "n7",
        format!(
            "enforcer running: Ready {:.1} s after the baseline's create, Enforced=True {:.1} s after Ready (period {} s): {message}",
            ready_after.as_secs_f64(),
            held.as_secs_f64(),
            PERIOD.as_secs()
        ),
    );

    // --- a real Prometheus on the chart's PodMonitor and alert rules ------------------------
    let prometheus = start_prometheus(&values).await;
    let alerts = prometheus.watch_alerts();

    // --- 2. paper wall: the enforcer stopped and its rules removed -------------------------
    let enforcer = Enforcer::from_env();
    // The chart's rules on a healthy install: nothing pending or firing once the first
    // scrapes are in (before them, ReconcilerAbsent is pending: there is no series yet).
    wait_until(
        "no alert pending or firing on the healthy install",
        Duration::from_secs(20),
        || async {
            match alerts.changes().last() {
                Some(change) if change.alerts.is_empty() => Ok(Some(())),
                Some(change) => anyhow::bail!("listed: {:?}", change.alerts),
                None => Ok(None),
            }
        },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
    let paper_at = watch.mark("kube-router stopped, its iptables rules removed");
    enforcer.stop_and_remove_rules();
    wait_wire(
        "the paper wall on the wire (walled -> open TCP passes)",
        Duration::from_secs(20),
        false,
        || walled.tcp(&node, &open.server()),
    )
    .await;
    assert_passed(
        "TCP open -> walled with no enforcer (the paper wall)",
        &open.tcp(&node, &walled.server()).unwrap(),
    );
    let (_, message) = watch.until("False", "NotEnforced", 3 * PERIOD).await;
    let false_at = Instant::now();
    let noticed = paper_at.elapsed();
    assert!(
        noticed <= 2 * PERIOD,
        "NotEnforced {noticed:?} after the enforcer stopped, more than two periods"
    );
    assert!(
        message.contains("ingress:") && message.contains("egress:"),
        "both directions named: {message}"
    );
    let notes = wait_until("a NotEnforced Event", Duration::from_secs(10), || async {
        let notes = cluster.events(&baseline, "NotEnforced").await?;
        Ok(Some(notes).filter(|notes| !notes.is_empty()))
    })
    .await
    .unwrap_or_else(|error| panic!("{error:#}"))
    .0;
    // The alert fires while the wall is still paper.
    let firing_at = alert_reaches(&alerts, "NotEnforced", "firing", paper_at, &prometheus).await;
    let back_at = watch.mark("kube-router started again");
    enforcer.start();
    wait_wire(
        "the wall back on the wire",
        Duration::from_secs(60),
        true,
        || walled.probe(&node, &["tcp", &open.server(), "300"]),
    )
    .await;
    let (_, _) = watch.until("True", "WallHoldsOnPackets", 3 * PERIOD).await;
    let true_at = Instant::now();
    let restored = back_at.elapsed();
    let resolved_at =
        alert_reaches(&alerts, "NotEnforced", "inactive", firing_at, &prometheus).await;
    figure(
        "n7",
        format!(
            "paper wall: Enforced=False NotEnforced {:.1} s after kube-router stopped (bound: 2 periods, {} s): {message}; Event {:?}; kube-router back: True again {:.1} s after its start",
            noticed.as_secs_f64(),
            2 * PERIOD.as_secs(),
            notes.first(),
            restored.as_secs_f64()
        ),
    );

    figure(
        "n7",
        alert_figure(
            &alerts,
            "NotEnforced",
            (paper_at, false_at, true_at, resolved_at),
        ),
    );

    // --- 3. DNS door broken on the wire, objects unchanged ---------------------------------
    // DNSReachable reads objects (the door against the Service's EndpointSlices): what it
    // says before the detour, it must say after.
    let dns_before = dns_reachable(&cluster, &baseline).await;
    let coredns = CoreDns::new(&cluster);
    let original = coredns.serve_also_on_5353().await;
    let dns_pod = coredns_ip(&cluster.admin).await.unwrap();
    let detour_at = watch.mark("kube-dns ClusterIP:53 DNATed to the CoreDNS pod's 5353");
    let detour = Detour::install(&node.cluster_dns, &dns_pod);
    let kube_dns = node.kube_dns();
    // The positive control first: the detour works (the replaced CoreDNS pod answers on 5353
    // through the DNAT), so that the walled pod's failure below is the door's, not DNS's.
    wait_wire(
        "DNS through the detour from the unwalled pod",
        Duration::from_secs(20),
        false,
        || open.dns(&node, "udp", &kube_dns, DNS_NAME),
    )
    .await;
    wait_wire(
        "the walled pod's DNS blocked by the detour",
        Duration::from_secs(20),
        true,
        || walled.dns(&node, "udp", &kube_dns, DNS_NAME),
    )
    .await;
    assert_passed(
        "DNS through the detour from the unwalled pod",
        &open.dns(&node, "udp", &kube_dns, DNS_NAME).unwrap(),
    );
    assert_blocked(
        "DNS from the walled pod through the detour",
        &walled.dns(&node, "udp", &kube_dns, DNS_NAME).unwrap(),
    );
    let (_, message) = watch.until("False", "DNSBlocked", 3 * PERIOD).await;
    let noticed = detour_at.elapsed();
    assert!(
        noticed <= 2 * PERIOD,
        "DNSBlocked {noticed:?} after the detour, more than two periods"
    );
    let reachable = dns_reachable(&cluster, &baseline).await;
    assert_eq!(
        (&reachable.0, &reachable.1),
        (&dns_before.0, &dns_before.1),
        "DNSReachable reads the objects, which the detour did not change: before {dns_before:?}, now {reachable:?}"
    );
    let undone_at = watch.mark("the detour removed");
    drop(detour);
    let (_, _) = watch.until("True", "WallHoldsOnPackets", 3 * PERIOD).await;
    let undone = undone_at.elapsed();
    figure(
        "n7",
        format!(
            "DNS detour: Enforced=False DNSBlocked {:.1} s after it (bound: 2 periods): {message}; DNSReachable stays as before the detour, {} {} ({}): it reads the Service's EndpointSlices and the door, which the detour did not change, while the packets go to a port the door does not open; detour removed: True again {:.1} s after",
            noticed.as_secs_f64(),
            reachable.0,
            reachable.1,
            reachable.2,
            undone.as_secs_f64()
        ),
    );
    coredns.restore(original).await;

    // --- what it cost ------------------------------------------------------------------------
    figure("n7", watch.report());
    figure("n7", alert_report(&alerts, paper_at));
    drop(alerts);
    drop(prometheus);
    figure("n7", probe_cost(&cluster).await);
    let left = probe_pods_left(&cluster, &[&canary, CONTROL_NAMESPACE]).await;
    drop(release);
    cluster.remove_all_baselines().await.unwrap();
    names.delete_namespaces(&[walled_ns, open_ns]).await;
    assert_eq!(left, 0, "probe pods left behind after the last round");
}

/// The condition's transitions, as the test polled them (every 250 ms).
struct Transitions {
    api: Api<namespace_baseline_core::spec::NamespaceBaseline>,
    name: String,
    started: Instant,
    seen: Option<(String, String)>,
    lines: Vec<String>,
}

impl Transitions {
    fn new(cluster: &Cluster, name: &str) -> Self {
        let mut transitions = Self {
            api: cluster.baselines(),
            name: name.to_owned(),
            started: Instant::now(),
            seen: None,
            lines: Vec::new(),
        };
        transitions.mark("baseline Ready");
        transitions
    }

    fn line(&mut self, text: String) {
        let line = format!(
            "{:>6.1} s  {}  {text}",
            self.started.elapsed().as_secs_f64(),
            Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::now())
        );
        eprintln!("   {line}");
        self.lines.push(line);
    }

    /// Notes an action; its time.
    fn mark(&mut self, what: &str) -> Instant {
        self.line(format!("-- {what}"));
        Instant::now()
    }

    /// Waits until `Enforced` is `status`/`reason`, noting every change on the way; how long
    /// it took and the condition's message.
    async fn until(&mut self, status: &str, reason: &str, timeout: Duration) -> (Duration, String) {
        let started = Instant::now();
        loop {
            let object = self.api.get(&self.name).await.unwrap();
            let found = object
                .status
                .as_ref()
                .and_then(|status| condition(status, "Enforced"));
            if let Some((now_status, now_reason, message)) = &found {
                let key = (now_status.clone(), now_reason.clone());
                if self.seen.as_ref() != Some(&key) {
                    let probed = object
                        .status
                        .as_ref()
                        .and_then(|s| s.last_probe_time.as_ref())
                        .map(|t| t.0.to_string())
                        .unwrap_or_default();
                    self.line(format!(
                        "Enforced={now_status} {now_reason} (lastProbeTime {probed}): {message}"
                    ));
                    self.seen = Some(key);
                }
                if now_status == status && now_reason == reason {
                    return (started.elapsed(), message.clone());
                }
            }
            assert!(
                started.elapsed() < timeout,
                "Enforced={status} {reason} not reached in {timeout:?}; now {found:?}; transitions:\n{}",
                self.lines.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn report(&self) -> String {
        format!(
            "Enforced transitions of the scenario:\n{}",
            self.lines.join("\n")
        )
    }
}

async fn dns_reachable(cluster: &Cluster, baseline: &str) -> (String, String, String) {
    let object = cluster.baselines().get(baseline).await.unwrap();
    object
        .status
        .as_ref()
        .and_then(|status| condition(status, "DNSReachable"))
        .expect("a DNSReachable condition")
}

/// The prefixes of kube-router's firewall chains (its entry chains, one per pod, one per
/// policy).
const KUBE_ROUTER_CHAINS: [&str; 3] = ["KUBE-ROUTER", "KUBE-POD-FW", "KUBE-NWPLCY"];

/// kube-router's firewall, the node's NetworkPolicy enforcer: stopped (and its rules taken
/// out of iptables) and started again with the command line `start.sh` gave it.
struct Enforcer {
    state_dir: String,
    stopped: std::cell::Cell<bool>,
}

impl Enforcer {
    fn from_env() -> Self {
        Self {
            state_dir: std::env::var("NSB_NODE_STATE_DIR")
                .expect("NSB_NODE_STATE_DIR: the node's state directory"),
            stopped: std::cell::Cell::new(false),
        }
    }

    fn pid(&self) -> u32 {
        let text = std::fs::read_to_string(format!("{}/kube-router.pid", self.state_dir))
            .expect("kube-router's pid file");
        let pid: u32 = text.trim().parse().expect("a pid");
        let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&command).contains("kube-router"),
            "pid {pid} is not kube-router"
        );
        pid
    }

    /// SIGTERM, wait for it to exit, then every iptables rule and chain of kube-router out
    /// (iptables-save without them, restored: the other rules stay as they are).
    fn stop_and_remove_rules(&self) {
        let pid = self.pid();
        assert!(run("kill", &["-TERM", &pid.to_string()]).0);
        for _ in 0..100 {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "kube-router (pid {pid}) did not exit"
        );
        self.stopped.set(true);
        let (ok, saved) = run("iptables-save", &[]);
        assert!(ok, "iptables-save failed: {saved}");
        let kept: String = saved
            .lines()
            .filter(|line| !KUBE_ROUTER_CHAINS.iter().any(|chain| line.contains(chain)))
            .map(|line| format!("{line}\n"))
            .collect();
        let mut restore = Command::new("iptables-restore")
            .stdin(Stdio::piped())
            .spawn()
            .expect("iptables-restore");
        restore
            .stdin
            .take()
            .unwrap()
            .write_all(kept.as_bytes())
            .unwrap();
        assert!(restore.wait().unwrap().success(), "iptables-restore failed");
        let (_, after) = run("iptables-save", &[]);
        assert!(
            !KUBE_ROUTER_CHAINS.iter().any(|chain| after.contains(chain)),
            "kube-router's rules are still there:\n{after}"
        );
    }

    /// Starts kube-router with its launcher from `start.sh` (it records its new pid) and
    /// waits for its chains.
    fn start(&self) {
        self.launch();
        let started = Instant::now();
        while !run("iptables", &["-w", "-S", "KUBE-ROUTER-FORWARD"]).0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "kube-router's chains not back after 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn launch(&self) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{}/kube-router.log", self.state_dir))
            .expect("kube-router's log");
        // setsid --fork: kube-router runs on in a session of its own; setsid returns at once.
        let launched = Command::new("setsid")
            .arg("--fork")
            .arg(format!("{}/kube-router.sh", self.state_dir))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .expect("starting kube-router");
        assert!(launched.success(), "setsid kube-router.sh failed");
        self.stopped.set(false);
    }
}

impl Drop for Enforcer {
    fn drop(&mut self) {
        if self.stopped.get() {
            eprintln!("!! n7: kube-router left stopped by a failure: starting it again");
            self.launch();
        }
    }
}

/// Runs a command in the test's network namespace (the node's): success and output.
fn run(program: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running {program}: {error}"));
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// An nftables DNAT in the node's network namespace, before kube-proxy's (priority -110):
/// the kube-dns ClusterIP's port 53 goes to the CoreDNS pod's 5353. Removed when dropped.
struct Detour;

impl Detour {
    fn install(cluster_dns: &str, coredns: &str) -> Self {
        let rules = format!(
            "table ip {DETOUR_TABLE} {{\n  chain prerouting {{\n    type nat hook prerouting priority -110; policy accept;\n    ip daddr {cluster_dns} udp dport 53 dnat to {coredns}:5353\n    ip daddr {cluster_dns} tcp dport 53 dnat to {coredns}:5353\n  }}\n}}\n"
        );
        let mut nft = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("nft");
        nft.stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(nft.wait().unwrap().success(), "nft failed on:\n{rules}");
        // Flows already tracked keep their old translation: start from none.
        let _ = run("conntrack", &["-D", "-d", cluster_dns]);
        Self
    }
}

impl Drop for Detour {
    fn drop(&mut self) {
        let (ok, text) = run("nft", &["delete", "table", "ip", DETOUR_TABLE]);
        if !ok {
            eprintln!("!! n7: removing the DNS detour failed: {text}");
        }
    }
}

/// CoreDNS's Corefile, served on 5353 as well as 53 (the DNS pods "served on a port the door
/// does not open"); its pod restarted to read it.
struct CoreDns {
    maps: Api<ConfigMap>,
    pods: Api<Pod>,
}

const SECOND_PORT: &str = "
.:5353 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
";

impl CoreDns {
    fn new(cluster: &Cluster) -> Self {
        Self {
            maps: Api::namespaced(cluster.admin.clone(), "kube-system"),
            pods: Api::namespaced(cluster.admin.clone(), "kube-system"),
        }
    }

    /// Adds the 5353 server; returns the Corefile as it was.
    async fn serve_also_on_5353(&self) -> String {
        let original = self.corefile().await;
        self.replace(format!("{original}{SECOND_PORT}")).await;
        original
    }

    async fn restore(&self, original: String) {
        self.replace(original).await;
    }

    async fn corefile(&self) -> String {
        let map = self.maps.get("coredns").await.unwrap();
        map.data
            .unwrap_or_default()
            .get("Corefile")
            .cloned()
            .expect("a Corefile")
    }

    /// Writes the Corefile and replaces the CoreDNS pod; waits for the new one to be Ready.
    async fn replace(&self, corefile: String) {
        let mut map = self.maps.get("coredns").await.unwrap();
        map.data = Some(BTreeMap::from([("Corefile".to_owned(), corefile)]));
        self.maps
            .replace("coredns", &PostParams::default(), &map)
            .await
            .unwrap();
        let selector = ListParams::default().labels("k8s-app=kube-dns");
        let old: Vec<String> = self
            .pods
            .list(&selector)
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        for name in &old {
            self.pods
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        }
        wait_until("a new CoreDNS pod Ready", Duration::from_secs(60), || {
            let pods = self.pods.clone();
            let selector = selector.clone();
            let old = old.clone();
            async move {
                let ready = pods.list(&selector).await?.items.into_iter().any(|pod| {
                    !old.contains(&pod.name_any())
                        && pod.metadata.deletion_timestamp.is_none()
                        && pod
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                });
                Ok(ready.then_some(()))
            }
        })
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    }
}

/// The probe's cost, from the reconciler's `probe round` log lines (JSON logs).
async fn probe_cost(cluster: &Cluster) -> String {
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), RECONCILER_NAMESPACE);
    let reconciler = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=namespace-baseline-reconciler"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("the reconciler pod");
    // The kubelet's log file of the container (the API server of the test node cannot reach
    // the kubelet's log endpoint), under the node's podLogsDir: CRI lines "TIME STREAM TAG
    // MESSAGE".
    let uid = reconciler.uid().expect("a pod uid");
    let state = std::env::var("NSB_NODE_STATE_DIR").expect("NSB_NODE_STATE_DIR");
    let file = format!(
        "{state}/pod-logs/{RECONCILER_NAMESPACE}_{}_{uid}/reconciler/0.log",
        reconciler.name_any()
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|error| panic!("{file}: {error}"));
    let log: String = text
        .lines()
        .filter_map(|line| line.splitn(4, ' ').nth(3))
        .map(|message| format!("{message}\n"))
        .collect();
    let rounds: Vec<Value> = log
        .lines()
        // The reconciler logs JSON with its fields flattened into the line
        // (runtime/telemetry.rs: `flatten_event(true)`).
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|fields| fields["message"] == "probe round" && fields["pods_created"] == 3)
        .collect();
    assert!(
        !rounds.is_empty(),
        "no `probe round` line with 3 pods in the reconciler's log ({file}, {} lines); its lines about the probe:\n{}",
        log.lines().count(),
        log.lines()
            .filter(|line| line.contains("probe"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let number = |round: &Value, field: &str| round[field].as_f64().unwrap_or(0.0);
    let stat = |field: &str| {
        let values: Vec<f64> = rounds.iter().map(|round| number(round, field)).collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let max = values.iter().copied().fold(0.0, f64::max);
        format!("{field} mean {mean:.1}, max {max:.0}")
    };
    format!(
        "probe cost over {} full rounds of one baseline: 3 pods each; {}; {}; {}; {}; {}; at a {} s period that is {:.1} API requests and 3 pods per period per baseline (the defaults: 5 min, 20 s listen window)",
        rounds.len(),
        stat("api_requests"),
        stat("seconds"),
        stat("probe_pods_cpu_ms"),
        stat("probe_pods_max_rss_kib"),
        stat("reconciler_cpu_ms"),
        PERIOD.as_secs(),
        rounds
            .iter()
            .map(|round| number(round, "api_requests"))
            .sum::<f64>()
            / rounds.len() as f64
    )
}

/// Probe pods in those namespaces older than two periods (a round's own pods are deleted at
/// its end; one may be running now).
async fn probe_pods_left(cluster: &Cluster, namespaces: &[&str]) -> usize {
    let old = |pod: &Pod| {
        pod.metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|created| {
                Timestamp::now().as_second() - created.0.as_second()
                    > i64::try_from(2 * PERIOD.as_secs()).unwrap_or(i64::MAX)
            })
    };
    let mut left = 0;
    for namespace in namespaces {
        let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), namespace);
        left += pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=namespace-baseline-probe"))
            .await
            .map(|list| {
                list.items
                    .iter()
                    .filter(|pod| pod.metadata.deletion_timestamp.is_none() && old(pod))
                    .count()
            })
            .unwrap_or(0);
    }
    left
}

/// Starts Prometheus on the chart's PodMonitor (rendered with the release's `values`, scraping
/// every second) and the chart's rules (`for:` of the NotEnforced alert [`ALERT_FOR`]); waits
/// for its first scrape and checks every metric the rules read is one it scraped.
async fn start_prometheus(values: &[String]) -> Prometheus {
    let monitored = [
        values.to_vec(),
        set("reconciler.podMonitor.enabled", true).to_vec(),
        set("reconciler.podMonitor.interval", "1s").to_vec(),
        set("reconciler.podMonitor.scrapeTimeout", "1s").to_vec(),
    ]
    .concat();
    let podmonitor = chart::template(&monitored, "templates/podmonitor.yaml");
    let started = Instant::now();
    let prometheus = Prometheus::start(
        &podmonitor,
        &set(
            "prometheusRule.for.notEnforced",
            format!("{}s", ALERT_FOR.as_secs()),
        ),
    );
    prometheus.wait_scraping(Duration::from_secs(60)).await;
    let scraped = prometheus.metric_names();
    let read = prometheus.rule_metric_names();
    let missing: Vec<&String> = read.difference(&scraped).collect();
    assert!(
        missing.is_empty(),
        "the rules read metrics the reconciler does not serve: {missing:?}; scraped: {scraped:?}"
    );
    figure(
        "n7",
        format!(
            "Prometheus (e2e-tests/alerts/build.sh) scraping the reconciler through the chart's PodMonitor {:.1} s after its start; the {} metrics the chart's rules read ({}) are all among the {} namespace_baseline_* names it scraped",
            started.elapsed().as_secs_f64(),
            read.len(),
            read.iter().cloned().collect::<Vec<_>>().join(", "),
            scraped
                .iter()
                .filter(|name| name.starts_with("namespace_baseline_"))
                .count()
        ),
    );
    prometheus
}

/// Waits (60 s at most) until the alert for `reason` is `state` ("pending", "firing", or
/// "inactive": no longer listed), as seen since `since`; when.
async fn alert_reaches(
    alerts: &AlertWatch,
    reason: &str,
    state: &str,
    since: Instant,
    prometheus: &Prometheus,
) -> Instant {
    wait_until(
        &format!("{ALERT}{{reason={reason}}} {state}"),
        Duration::from_secs(60),
        || async { Ok(alerts.first(ALERT, ("reason", reason), state, since)) },
    )
    .await
    .unwrap_or_else(|error| {
        panic!(
            "{error:#}; the alerts seen: {:#?}; Prometheus's log:\n{}",
            alerts.changes(),
            prometheus.log()
        )
    })
    .0
}

/// The alert's transitions for `reason` against the condition's: pending after
/// `Enforced=False` was seen, firing `for:` later, resolved after `Enforced=True` was seen.
fn alert_figure(
    alerts: &AlertWatch,
    reason: &str,
    (paper_at, false_at, true_at, resolved_at): (Instant, Instant, Instant, Instant),
) -> String {
    let pending_at = alerts
        .first(ALERT, ("reason", reason), "pending", paper_at)
        .unwrap_or_else(|| panic!("{ALERT} never pending: {:#?}", alerts.changes()));
    let firing_at = alerts
        .first(ALERT, ("reason", reason), "firing", pending_at)
        .unwrap_or_else(|| panic!("{ALERT} never firing: {:#?}", alerts.changes()));
    let seconds = |from: Instant, to: Instant| {
        to.checked_duration_since(from)
            .map_or_else(|| -(from - to).as_secs_f64(), |d| d.as_secs_f64())
    };
    // Pending is Prometheus's own state between the first evaluation that finds the
    // condition and `for:` later: seen (polled every 100 ms) at least for: - 0.2 s before it
    // fires.
    assert!(
        seconds(pending_at, firing_at) >= ALERT_FOR.as_secs_f64() - 0.2,
        "{ALERT} fired {:.1} s after pending, before its for: ({ALERT_FOR:?})",
        seconds(pending_at, firing_at)
    );
    // The test polls the condition every 250 ms, Prometheus scrapes and evaluates every
    // second: the alert cannot resolve before the gauge changed with the status.
    assert!(
        seconds(true_at, resolved_at) > -0.3,
        "resolved {:.1} s before Enforced=True was seen",
        seconds(resolved_at, true_at)
    );
    let utc = |at: Instant| {
        let wall = alerts
            .changes()
            .into_iter()
            .find(|change| change.at == at)
            .map(|change| change.wall)
            .unwrap();
        Timestamp::try_from(wall).unwrap().to_string()
    };
    format!(
        "alert {ALERT}{{reason={reason}}} (the chart's rule, for: {} s here, scrape and evaluation every 1 s): pending {:.1} s after Enforced=False {reason} was seen ({:.1} s after kube-router stopped), firing {:.1} s after pending, resolved {:.1} s after Enforced=True was seen; pending at {}, firing at {}, resolved at {}",
        ALERT_FOR.as_secs(),
        seconds(false_at, pending_at),
        seconds(paper_at, pending_at),
        seconds(pending_at, firing_at),
        seconds(true_at, resolved_at),
        utc(pending_at),
        utc(firing_at),
        utc(resolved_at)
    )
}

/// Every change of the alerts Prometheus listed, from `since`.
fn alert_report(alerts: &AlertWatch, since: Instant) -> String {
    let lines: Vec<String> = alerts
        .changes()
        .into_iter()
        .map(|change| {
            let listed: Vec<String> = change
                .alerts
                .iter()
                .map(|alert| format!("{}{:?} {}", alert.name, alert.labels, alert.state))
                .collect();
            let offset = change
                .at
                .checked_duration_since(since)
                .map_or_else(|| -(since - change.at).as_secs_f64(), |d| d.as_secs_f64());
            format!(
                "{offset:>6.1} s  {}  [{}]",
                Timestamp::try_from(change.wall).unwrap(),
                listed.join(", ")
            )
        })
        .collect();
    format!(
        "the alerts Prometheus listed, from kube-router's stop (0 s):\n{}",
        lines.join("\n")
    )
}
