//! The node side of the node tests: the node's settings (from `e2e-tests/node/start.sh`'s env
//! file), test pods, and probes run in a pod's network namespace.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use namespace_baseline_cluster_tests::wait_until;
use serde_json::json;

/// The test node, as `e2e-tests/node/start.sh` describes it in its env file.
pub struct Node {
    pub containerd: String,
    /// The process holding the node's network and mount namespaces.
    pub holder: String,
    pub netprobe: PathBuf,
    pub cluster_dns: String,
    pub tools_image: String,
    pub coredns_image: String,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: the node tests run on the node of e2e-tests/node/ (`make node-tests`)")
    })
}

impl Node {
    /// `program` in the node's network namespace (the holder's), arguments to add.
    pub fn in_network(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["--target", &self.holder, "--net", "--", program]);
        command
    }

    /// What the node's firewall holds for traffic between `a` and `b`: their conntrack
    /// entries and the filter rules that name either address. Printed when a probe the wall
    /// should have blocked got through, so that a failure says whether kube-router's rules
    /// were missing or a tracked flow let the packet by.
    pub fn firewall_state(&self, a: &str, b: &str) -> String {
        let run = |argv: &[&str]| -> String {
            match self.in_network(argv[0]).args(&argv[1..]).output() {
                Ok(output) => format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
                Err(error) => format!("cannot run {argv:?}: {error}\n"),
            }
        };
        let conntrack: String = run(&["conntrack", "-L"])
            .lines()
            .filter(|line| line.contains(a) && line.contains(b))
            .map(|line| format!("  {line}\n"))
            .collect();
        let rules: String = run(&["iptables-save", "-t", "filter"])
            .lines()
            .filter(|line| line.contains(a) || line.contains(b))
            .map(|line| format!("  {line}\n"))
            .collect();
        format!(
            "conntrack entries between {a} and {b}:\n{conntrack}filter rules naming either:\n{rules}"
        )
    }

    /// Panics when the node's settings are missing: no node must never look like a pass.
    pub fn from_env() -> Self {
        Self {
            containerd: env("NSB_CONTAINERD_ADDRESS"),
            holder: env("NSB_NODE_HOLDER_PID"),
            netprobe: PathBuf::from(env("NSB_NETPROBE_BIN")),
            cluster_dns: env("NSB_CLUSTER_DNS"),
            tools_image: env("NSB_IMAGE_TOOLS"),
            coredns_image: env("NSB_IMAGE_COREDNS"),
        }
    }

    /// `ctr` in the node's mount namespace (containerd's /run, where exec's FIFOs live).
    fn ctr(&self) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["--target", &self.holder, "--mount", "--", "ctr"]);
        command.args(["--address", &self.containerd, "-n", "k8s.io"]);
        command
    }

    /// The host PID of a container's task.
    pub fn task_pid(&self, container_id: &str) -> Result<u32> {
        let output = self.ctr().args(["task", "ls"]).output()?;
        ensure!(output.status.success(), "ctr task ls failed");
        let text = String::from_utf8_lossy(&output.stdout);
        text.lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next() == Some(container_id))
                    .then(|| fields.next()?.parse().ok())
                    .flatten()
            })
            .with_context(|| format!("no task for container {container_id} in `ctr task ls`"))
    }

    /// The kube-dns ClusterIP on port 53.
    pub fn kube_dns(&self) -> String {
        format!("{}:53", self.cluster_dns)
    }

    /// `netprobe` built static, to run inside a pod's own container (mounted from the node).
    pub fn netprobe_static(&self) -> PathBuf {
        PathBuf::from(env("NSB_NETPROBE_STATIC_BIN"))
    }

    /// What a container of a pod wrote to stdout, as the kubelet keeps it (its `podLogsDir`
    /// is in the node's state directory): the lines, without the CRI log prefix.
    pub fn container_log(&self, pod: &Pod, container: &str) -> Result<Vec<String>> {
        let meta = &pod.metadata;
        let dir = format!(
            "{}_{}_{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default()
        );
        let path = PathBuf::from(env("NSB_NODE_STATE_DIR"))
            .join("pod-logs")
            .join(dir)
            .join(container)
            .join("0.log");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        // `<time> stdout F <line>`
        Ok(text
            .lines()
            .filter_map(|line| line.splitn(4, ' ').nth(3).map(str::to_owned))
            .collect())
    }
}

/// What one probe saw.
#[derive(Debug, Clone)]
pub struct Probe {
    /// open, reply, refused, unreachable, timeout or error.
    pub result: String,
    pub ms: f64,
    pub detail: String,
}

impl Probe {
    fn parse(line: &str) -> Self {
        let mut fields = line.split_whitespace();
        let result = fields.next().unwrap_or("error").to_owned();
        let ms = fields.next().and_then(|ms| ms.parse().ok()).unwrap_or(0.0);
        let detail = fields.collect::<Vec<_>>().join(" ");
        Self { result, ms, detail }
    }

    /// The packets got through (a connection, a DNS reply).
    pub fn passed(&self) -> bool {
        self.result == "open" || self.result == "reply"
    }

    /// Nothing got through: refused (RST/ICMP), unreachable (ICMP) or a timeout (dropped).
    pub fn blocked(&self) -> bool {
        matches!(self.result.as_str(), "refused" | "unreachable" | "timeout")
    }

    /// The A records of a DNS reply with RCODE 0, else empty.
    pub fn addresses(&self) -> Vec<String> {
        if self.result != "reply" || !self.detail.starts_with("rcode=0 ") {
            return Vec::new();
        }
        self.detail
            .split_whitespace()
            .find_map(|field| field.strip_prefix("a="))
            .map(|list| {
                list.split(',')
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} after {:.0} ms", self.result, self.ms)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A test pod: a `whoami` DNS server (CoreDNS's default server) on 5353 UDP and TCP, and a
/// busybox `tools` container; probes run in its network namespace.
pub struct TestPod {
    pub namespace: String,
    pub name: String,
    pub ip: String,
    pub tools_container: String,
    pub pid: u32,
}

/// The port the test pods serve on (UDP and TCP).
pub const SERVER_PORT: u16 = 5353;

static EXEC_IDS: AtomicU32 = AtomicU32::new(0);

impl TestPod {
    /// `IP:5353` of this pod.
    pub fn server(&self) -> String {
        format!("{}:{SERVER_PORT}", self.ip)
    }

    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn netns(&self) -> String {
        format!("--net=/proc/{}/ns/net", self.pid)
    }

    /// Runs `netprobe ARGS` in the pod's network namespace.
    pub fn probe(&self, node: &Node, args: &[&str]) -> Result<Probe> {
        let output = Command::new("nsenter")
            .arg(self.netns())
            .arg("--")
            .arg(&node.netprobe)
            .args(args)
            .output()
            .context("running netprobe in the pod's network namespace (nsenter)")?;
        ensure!(
            output.status.success(),
            "netprobe {args:?} in {} failed: {}",
            self.label(),
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8_lossy(&output.stdout);
        Ok(Probe::parse(text.trim()))
    }

    /// A TCP connection to `target` (1 s timeout).
    pub fn tcp(&self, node: &Node, target: &str) -> Result<Probe> {
        self.probe(node, &["tcp", target, "1000"])
    }

    /// A DNS query over UDP to `target` (1 s timeout); the test servers answer any name.
    pub fn udp(&self, node: &Node, target: &str) -> Result<Probe> {
        self.dns(node, "udp", target, "probe.nsb.test")
    }

    /// A DNS query for `name` over `transport` (udp or tcp) to `target` (1 s timeout).
    pub fn dns(&self, node: &Node, transport: &str, target: &str, name: &str) -> Result<Probe> {
        self.probe(node, &["dns", transport, target, name, "1000"])
    }

    /// Runs a command in the `tools` container (`ctr task exec`): exit code and output.
    pub fn exec(&self, node: &Node, argv: &[&str]) -> Result<(i32, String)> {
        let id = format!(
            "nsb-{}-{}",
            std::process::id(),
            EXEC_IDS.fetch_add(1, Ordering::Relaxed)
        );
        let output = node
            .ctr()
            .args(["task", "exec", "--exec-id", &id, &self.tools_container])
            .args(argv)
            .output()
            .context("ctr task exec")?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok((output.status.code().unwrap_or(-1), text))
    }

    /// Starts a prober in this pod: a TCP connection (`transport` tcp) or a DNS query over
    /// UDP (udp) to `target` every `every_ms`, each with `timeout_ms`, for `for_ms`.
    pub fn watch(
        &self,
        node: &Node,
        transport: &str,
        target: &str,
        timeout_ms: u64,
        every_ms: u64,
        for_ms: u64,
    ) -> Result<Watch> {
        let mut child = Command::new("nsenter")
            .arg(self.netns())
            .arg("--")
            .arg(&node.netprobe)
            .args([
                "watch",
                transport,
                target,
                &timeout_ms.to_string(),
                &every_ms.to_string(),
                &for_ms.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting netprobe watch")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let seen: Arc<Mutex<Vec<(u128, bool)>>> = Arc::default();
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(record) = watch_record(&line) {
                    sink.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(record);
                }
            }
        });
        Ok(Watch {
            child,
            seen,
            timeout: Duration::from_millis(timeout_ms),
        })
    }
}

/// A line of `netprobe watch` (`<start µs> <result> <ms>`): when the probe started and
/// whether it got through; `None` for a line that is not a probe or an error that says
/// nothing about the path.
pub fn watch_record(line: &str) -> Option<(u128, bool)> {
    let (at, result) = line.trim().split_once(' ')?;
    let at = at.parse::<u128>().ok()?;
    let probe = Probe::parse(result);
    (probe.passed() || probe.blocked()).then_some((at, probe.passed()))
}

/// Microseconds since the epoch (the prober's clock).
pub fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

/// A running prober: probe start times (µs since the epoch) and whether each got through.
pub struct Watch {
    child: Child,
    seen: Arc<Mutex<Vec<(u128, bool)>>>,
    pub timeout: Duration,
}

impl Watch {
    /// The probes that started at or after `since`, in start order; only those whose result
    /// is known (a probe started less than the timeout ago may still be missing).
    pub fn since(&self, since: u128) -> Vec<(u128, bool)> {
        let mut probes: Vec<(u128, bool)> = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .filter(|(at, _)| *at >= since)
            .collect();
        probes.sort_unstable();
        probes
    }

    /// Waits until every probe started in the last `settle` (and at least 3) was blocked,
    /// or (when `open`) got through: returns the start of the first probe of that final run
    /// after `since`, or an error after `timeout`.
    pub async fn wait_state(
        &self,
        since: u128,
        open: bool,
        settle: Duration,
        timeout: Duration,
    ) -> Result<u128> {
        let what = format!(
            "the path to become {}",
            if open { "open" } else { "blocked" }
        );
        let (first, _) = wait_until(&what, timeout, || {
            // Only probes old enough to have a result for sure.
            let horizon = now_us().saturating_sub(self.timeout.as_micros() + 100_000);
            let probes: Vec<(u128, bool)> = self
                .since(since)
                .into_iter()
                .filter(|(at, _)| *at <= horizon)
                .collect();
            let result = if let Some(first) = settled_run(&probes, open, settle, horizon) {
                Ok(Some(first))
            } else {
                Err(anyhow::anyhow!(
                    "{} probes since, {} through",
                    probes.len(),
                    probes.iter().filter(|(_, passed)| *passed).count()
                ))
            };
            async move { result }
        })
        .await?;
        Ok(first)
    }
}

/// The start of the final run of `probes` (in start order, each with a known result by
/// `horizon`, µs since the epoch) that all got through (`open`) or were all blocked, when
/// that run has at least 3 probes and began `settle` or more before `horizon`.
pub fn settled_run(
    probes: &[(u128, bool)],
    open: bool,
    settle: Duration,
    horizon: u128,
) -> Option<u128> {
    let run_start = probes
        .iter()
        .rposition(|(_, passed)| *passed != open)
        .map_or(0, |i| i + 1);
    let run = &probes[run_start..];
    let (first, _) = run.first()?;
    (run.len() >= 3 && horizon.saturating_sub(*first) >= settle.as_micros()).then_some(*first)
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates a test pod (retrying while the namespace's default ServiceAccount does not exist
/// yet) and waits until it runs; returns it with its IP and its `tools` container's PID.
pub async fn start_pod(client: &Client, node: &Node, namespace: &str, name: &str) -> TestPod {
    try_start_pod(client, node, namespace, name)
        .await
        .unwrap_or_else(|error| panic!("test pod {namespace}/{name}: {error:#}"))
}

async fn try_start_pod(
    client: &Client,
    node: &Node,
    namespace: &str,
    name: &str,
) -> Result<TestPod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "nsb-probe"}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": false,
            "containers": [
                whoami_container(node),
                {
                    "name": "tools",
                    "image": node.tools_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]
                }
            ]
        }
    }))?;
    wait_until(
        &format!("creating pod {namespace}/{name}"),
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            let pod = pod.clone();
            async move {
                match pods.create(&PostParams::default(), &pod).await {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(Some(())),
                    Err(error) => Err(error.into()),
                }
            }
        },
    )
    .await?;
    let (pod, _) = wait_until(
        &format!("pod {namespace}/{name} running and ready"),
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get(name).await?;
                let status = pod.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                Ok((ready && status.pod_ip.is_some()).then_some(pod))
            }
        },
    )
    .await?;
    let status = pod.status.clone().unwrap_or_default();
    let tools_container = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == "tools")
        .and_then(|c| c.container_id.clone())
        .context("no tools container ID")?
        .trim_start_matches("containerd://")
        .to_owned();
    let pid = node.task_pid(&tools_container)?;
    Ok(TestPod {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        ip: status.pod_ip.unwrap_or_default(),
        tools_container,
        pid,
    })
}

/// The test pods' server: CoreDNS's `whoami` on [`SERVER_PORT`], UDP and TCP.
pub fn whoami_container(node: &Node) -> serde_json::Value {
    json!({
        "name": "whoami",
        "image": node.coredns_image,
        "imagePullPolicy": "IfNotPresent",
        // No Corefile: CoreDNS serves its default `whoami` zone on -dns.port.
        "args": [format!("-dns.port={SERVER_PORT}")],
        "ports": [
            {"containerPort": SERVER_PORT, "protocol": "UDP"},
            {"containerPort": SERVER_PORT, "protocol": "TCP"}
        ]
    })
}

/// The IP of the (one) CoreDNS pod behind kube-dns.
pub async fn coredns_ip(client: &Client) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let list = pods
        .list(&ListParams::default().labels("k8s-app=kube-dns"))
        .await?;
    // A CoreDNS pod being replaced is still listed, with its IP, until it is gone: the
    // answer is the Ready pod that is not being deleted (n7 DNATs to it right after a
    // replacement; the old one's address timed out).
    list.items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .find_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .context("no Ready CoreDNS pod with an IP")
}

/// Labels of the pods' namespaces, by name (none: not walled).
pub fn no_labels() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// The `p`-th percentile (0..=100) of `values` in any order (nearest rank).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    namespace_baseline_cluster_tests::percentile(&sorted, p)
}
