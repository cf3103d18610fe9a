//! The policy against its host's floor. Every request class is evaluated in the waPC host
//! Kubewarden's policy-server embeds (wasmtime, the module compiled once and one instance
//! reused), by our `policy.wasm` and by a no-op policy (`e2e-tests/noop-policy`: same SDK,
//! same settings check, accepts every request without reading it) on the same payload, and
//! by our policy natively (`namespace_baseline_policy::evaluate_in_host`, the same bytes and
//! host answers).
//!
//! One run measures twice:
//! 1. criterion, one benchmark per class and variant: medians and median absolute deviations;
//! 2. an interleaved pass: in each of [`ROUNDS`] rounds every wasm variant runs a batch of
//!    calls in turn; per-call medians over the rounds, and each ratio (ours / no-op,
//!    context-aware / settings-only) as the median of its per-round ratios, so that a change
//!    of load on this shared machine falls on both sides of a ratio alike. The same pass
//!    times the test host's own answers to the class's host calls (natively: the list, the
//!    Namespace or a NetworkPolicy pruned to the field masks and written as JSON; all the calls
//!    of one evaluation), the host's share of a call.
//!
//! Then a table of both, the goals of issue 17 part 4, the modules' sizes and cold starts.
//! Run with `make bench-policy` (it builds both modules the same way). `NSB_BENCH_QUICK=1`
//! skips criterion (the interleaved pass alone, ~20 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion};
use namespace_baseline_core::admission::{HostCapabilities, evaluate_in_host};
use namespace_baseline_e2e::{Cluster, PolicyHost, VALIDATE, host_answer};
use namespace_baseline_formats::fixture::{self, Fixture};
use serde_json::{Value, json};

/// What a class is measured for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A settings-only path the goal names: ≤ 1.5× the no-op policy.
    SettingsGoal,
    /// Settings-only too, measured for the record.
    SettingsInfo,
    /// A Namespace label change decided from the live baselines: ≤ 2× [`SETTINGS_PAIR`] at 100.
    ContextAware,
    /// The holes check (a host call for the Namespace), for information.
    Holes,
    /// A Pod CREATE under `podsWaitForWall` (issue 26): the list of baselines, then, when a
    /// baseline enforces a wall, the pod's Namespace, then the wall's NetworkPolicies by name
    /// (`walls`) when the namespace is guarded. For the record: without the rule a Pod CREATE
    /// never reaches the policy, so all of it is added cost.
    Pods {
        reads_namespace: bool,
        walls: &'static [&'static str],
    },
}

/// One request class: a fixture, and for the context-aware classes the cluster's baselines.
struct Case {
    class: &'static str,
    fixture: &'static str,
    baselines: Option<usize>,
    role: Role,
}

/// The settings-only class the context-aware classes are compared with: the same kind of
/// request (a Namespace UPDATE that drops a guard label), decided from the settings alone.
const SETTINGS_PAIR: &str = "ns-update-remove-guard";

const CASES: &[Case] = &[
    Case {
        class: "np-delete-managed",
        fixture: "policy-delete-managed-deny-all",
        baselines: None,
        role: Role::SettingsGoal,
    },
    Case {
        class: SETTINGS_PAIR,
        fixture: "namespace-remove-guard-label",
        baselines: None,
        role: Role::SettingsGoal,
    },
    Case {
        class: "np-update-managed",
        fixture: "policy-update-pod-selector-narrowed",
        baselines: None,
        role: Role::SettingsInfo,
    },
    Case {
        class: "unrelated-accepted",
        fixture: "policy-create-unmanaged",
        baselines: None,
        role: Role::SettingsInfo,
    },
    Case {
        class: "ns-update-ca-1",
        fixture: "ca-namespace-leaves-live-baseline",
        baselines: Some(1),
        role: Role::ContextAware,
    },
    Case {
        class: "ns-update-ca-100",
        fixture: "ca-namespace-leaves-live-baseline",
        baselines: Some(100),
        role: Role::ContextAware,
    },
    Case {
        class: "ns-update-ca-1000",
        fixture: "ca-namespace-leaves-live-baseline",
        baselines: Some(1000),
        role: Role::ContextAware,
    },
    Case {
        class: "np-create-hole",
        fixture: "holes-warn-ingress-from-anywhere",
        baselines: None,
        role: Role::Holes,
    },
    Case {
        class: "pod-create-unguarded",
        fixture: "pods-unguarded-namespace",
        baselines: None,
        role: Role::Pods {
            reads_namespace: true,
            walls: &[],
        },
    },
    Case {
        class: "pod-create-walled",
        fixture: "pods-guarded-walled",
        baselines: None,
        role: Role::Pods {
            reads_namespace: true,
            walls: &["nsb-guarded-default-deny", "nsb-guarded-allow-dns"],
        },
    },
    Case {
        class: "pod-create-unwalled",
        fixture: "pods-guarded-no-deny-all",
        baselines: None,
        role: Role::Pods {
            reads_namespace: true,
            walls: &["nsb-guarded-default-deny"],
        },
    },
];

/// Rounds of the interleaved pass, and the time each batch of calls aims at.
const ROUNDS: usize = 41;
const BATCH_TARGET: Duration = Duration::from_millis(2);

/// The goals of issue 17, part 4.
const SETTINGS_GOAL: f64 = 1.5;
const CONTEXT_AWARE_GOAL: f64 = 2.0;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> Fixture {
    fixture::load(&repo().join(fixture::DIR), name).unwrap_or_else(|e| panic!("{e}"))
}

/// `count` baselines as the API server holds them (before the policy's field masks); the one
/// that guards the fixture's namespace comes last, so that every one is read.
fn baselines(count: usize) -> Vec<Value> {
    let baseline = |name: String, label: String| {
        json!({
            "apiVersion": "hedronite.io/v1alpha1",
            "kind": "NamespaceBaseline",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "9001", "generation": 1},
            "spec": {"namespaceLabel": label, "allowDNS": true},
            "status": {"observedGeneration": 1, "namespaces": 4, "objectsApplied": 0},
        })
    };
    (1..count)
        .map(|i| baseline(format!("team-{i}"), format!("team-{i}=walled")))
        .chain([baseline("internal-zone".into(), "zone=internal".into())])
        .collect()
}

/// The native counterpart of the host capabilities: the test host's own answers (written
/// once), read by the policy's own reader of host answers.
struct NativeCluster {
    list: Result<Vec<u8>, String>,
    namespaces: Arc<Cluster>,
}

impl HostCapabilities for NativeCluster {
    fn list_baselines(&self) -> Result<Vec<u8>, String> {
        self.list.clone()
    }

    fn get_namespace(&self, name: &str) -> Result<Vec<u8>, String> {
        let request = namespace_baseline_policy::get_namespace_request(name)
            .map_err(|error| error.to_string())?;
        host_answer(
            &self.namespaces,
            "kubewarden",
            "kubernetes",
            "get_resource",
            &request,
        )
    }

    fn get_network_policy(&self, namespace: &str, name: &str) -> Result<Vec<u8>, String> {
        let request = namespace_baseline_policy::get_network_policy_request(namespace, name)
            .map_err(|error| error.to_string())?;
        host_answer(
            &self.namespaces,
            "kubewarden",
            "kubernetes",
            "get_resource",
            &request,
        )
    }
}

/// The host calls a class makes (operation and payload), in order.
fn host_calls(case: &Case, namespace: &str) -> Vec<(&'static str, Vec<u8>)> {
    let list = || {
        (
            "list_resources_all",
            namespace_baseline_policy::LIST_BASELINES_REQUEST
                .as_bytes()
                .to_vec(),
        )
    };
    let get_namespace = || {
        (
            "get_resource",
            namespace_baseline_policy::get_namespace_request(namespace).expect("a request"),
        )
    };
    match case.role {
        Role::ContextAware => vec![list()],
        Role::Holes => vec![get_namespace()],
        Role::Pods {
            reads_namespace,
            walls,
        } => {
            let mut calls = vec![list()];
            if reads_namespace {
                calls.push(get_namespace());
            }
            calls.extend(walls.iter().map(|name| {
                (
                    "get_resource",
                    namespace_baseline_policy::get_network_policy_request(namespace, name)
                        .expect("a request"),
                )
            }));
            calls
        }
        Role::SettingsGoal | Role::SettingsInfo => Vec::new(),
    }
}

struct Prepared {
    case: &'static Case,
    payload: Vec<u8>,
    cluster: Arc<Cluster>,
    native: NativeCluster,
    host_calls: Vec<(&'static str, Vec<u8>)>,
}

fn prepare(case: &'static Case) -> Prepared {
    let fixture = fixture(case.fixture);
    let mut cluster = Cluster::from(&fixture);
    if let Some(count) = case.baselines {
        cluster.baselines = baselines(count);
    }
    let cluster = Arc::new(cluster);
    let payload =
        serde_json::to_vec(&json!({"settings": fixture.settings, "request": fixture.request}))
            .expect("a JSON payload");
    let list = host_answer(
        &cluster,
        "kubewarden",
        "kubernetes",
        "list_resources_all",
        namespace_baseline_policy::LIST_BASELINES_REQUEST.as_bytes(),
    );
    Prepared {
        case,
        payload,
        native: NativeCluster {
            list,
            namespaces: Arc::clone(&cluster),
        },
        cluster,
        host_calls: host_calls(
            case,
            fixture.request["namespace"].as_str().unwrap_or("team-a"),
        ),
    }
}

/// The two modules: ours, and the no-op floor.
fn module(variable: &str, default: PathBuf, build: &str) -> (PathBuf, Vec<u8>) {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or(default);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (build it with {build}, or set {variable})",
            path.display()
        )
    });
    (path, bytes)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The accepted flag of a ValidationResponse.
fn accepted(response: &[u8]) -> bool {
    let value: Value = serde_json::from_slice(response).expect("a ValidationResponse");
    value["accepted"].as_bool().expect("accepted")
}

/// Per-call nanoseconds of `calls` evaluations, after one untimed call (which pays for
/// anything the previous batch left, such as dropping another class's cluster).
fn time_batch(host: &mut PolicyHost, prepared: &Prepared, calls: usize) -> f64 {
    let call = |host: &mut PolicyHost| {
        host.call_shared(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer")
    };
    call(host);
    let started = Instant::now();
    for _ in 0..calls {
        call(host);
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

/// Per-evaluation nanoseconds of the test host answering the class's host calls (all of
/// them, as one evaluation makes them) `calls` times. A "not found" is an answer too.
fn time_host(prepared: &Prepared, calls: usize) -> f64 {
    if prepared.host_calls.is_empty() {
        return 0.0;
    }
    let started = Instant::now();
    for _ in 0..calls {
        for (operation, request) in &prepared.host_calls {
            let _answer = host_answer(
                &prepared.cluster,
                "kubewarden",
                "kubernetes",
                operation,
                request,
            );
        }
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

/// One class's samples of the interleaved pass: per-call nanoseconds per round.
#[derive(Default)]
struct Rounds {
    ours: Vec<f64>,
    noop: Vec<f64>,
    host: Vec<f64>,
}

/// The interleaved pass.
fn interleaved(ours: &mut PolicyHost, noop: &mut PolicyHost, cases: &[Prepared]) -> Vec<Rounds> {
    let size = |once: f64| ((BATCH_TARGET.as_nanos() as f64 / once).ceil() as usize).max(1);
    let batches: Vec<[usize; 3]> = cases
        .iter()
        .map(|prepared| {
            [
                size(time_batch(ours, prepared, 3)),
                size(time_batch(noop, prepared, 3)),
                size(time_host(prepared, 3).max(1.0)),
            ]
        })
        .collect();
    let mut samples: Vec<Rounds> = cases.iter().map(|_| Rounds::default()).collect();
    for _ in 0..ROUNDS {
        for ((prepared, [ours_calls, noop_calls, host_calls]), rounds) in
            cases.iter().zip(&batches).zip(&mut samples)
        {
            rounds.ours.push(time_batch(ours, prepared, *ours_calls));
            rounds.noop.push(time_batch(noop, prepared, *noop_calls));
            rounds.host.push(time_host(prepared, *host_calls));
        }
    }
    samples
}

fn per_round_ratio(numerator: &[f64], denominator: &[f64]) -> f64 {
    median(
        numerator
            .iter()
            .zip(denominator)
            .map(|(a, b)| a / b)
            .collect(),
    )
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let quick = std::env::var_os("NSB_BENCH_QUICK").is_some();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    let (ours_path, ours_wasm) = module(
        "POLICY_WASM",
        repo().join("policy.wasm"),
        "make policy.wasm",
    );
    let (noop_path, noop_wasm) = module(
        "NOOP_POLICY_WASM",
        target.join("noop-policy.wasm"),
        "make bench-policy",
    );
    let output = Path::new(env!("CARGO_TARGET_TMPDIR")).join("criterion");
    let mut criterion = Criterion::default()
        .output_directory(&output)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let load_before = load_average();

    // Cold start: compile + instantiate, as a policy-server does once per policy.
    let cold = |wasm: &[u8]| -> f64 {
        median(
            (0..5)
                .map(|_| {
                    let started = Instant::now();
                    PolicyHost::new(wasm).expect("the module loads");
                    started.elapsed().as_secs_f64() * 1e3
                })
                .collect(),
        )
    };
    let (cold_ours, cold_noop) = (cold(&ours_wasm), cold(&noop_wasm));

    let mut ours = PolicyHost::new(&ours_wasm).expect("our module loads");
    let mut noop = PolicyHost::new(&noop_wasm).expect("the no-op module loads");
    let cases: Vec<Prepared> = CASES.iter().map(prepare).collect();
    for prepared in &cases {
        let case = prepared.case;
        let fixture = fixture(case.fixture);
        let allowed = fixture.expect.allowed.expect("expect.allowed");
        // Every path reaches the fixture's verdict (the no-op: acceptance) before it is timed.
        let wasm = ours
            .call_shared(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer");
        assert_eq!(accepted(&wasm.response), allowed, "{}", case.class);
        assert_eq!(
            wasm.capability_calls().count(),
            prepared.host_calls.len(),
            "{}",
            case.class
        );
        if let Some(expected) = fixture.expect.host_calls {
            assert_eq!(
                expected,
                prepared.host_calls.len(),
                "{}: the fixture's host calls",
                case.class
            );
        }
        let native = evaluate_in_host(&prepared.payload, &prepared.native).expect("a verdict");
        assert_eq!(native.is_allowed(), allowed, "{}", case.class);
        let floor = noop
            .call_shared(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer");
        assert!(accepted(&floor.response), "the no-op accepts");
        if quick {
            continue;
        }
        let mut group = criterion.benchmark_group(case.class);
        for (variant, host) in [("wasm", &mut ours), ("noop", &mut noop)] {
            group.bench_function(BenchmarkId::from_parameter(variant), |b| {
                b.iter(|| {
                    host.call_shared(VALIDATE, &prepared.payload, &prepared.cluster)
                        .unwrap()
                })
            });
        }
        group.bench_function(BenchmarkId::from_parameter("native"), |b| {
            b.iter(|| evaluate_in_host(&prepared.payload, &prepared.native).unwrap())
        });
        group.finish();
    }
    if !quick {
        criterion.final_summary();
    }

    let rounds = interleaved(&mut ours, &mut noop, &cases);
    let load_after = load_average();

    println!();
    println!(
        "policy.wasm ({}): {} bytes, cold start (compile + instantiate) median {:.1} ms over 5",
        ours_path.display(),
        ours_wasm.len(),
        cold_ours
    );
    println!(
        "no-op policy ({}): {} bytes, cold start median {:.1} ms over 5",
        noop_path.display(),
        noop_wasm.len(),
        cold_noop
    );
    println!("load average (1, 5, 15 min): {load_before} before, {load_after} after");
    if !quick {
        let estimate = |class: &str, variant: &str| -> (f64, f64) {
            let file = output.join(class).join(variant).join("new/estimates.json");
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let value: Value = serde_json::from_str(&text).expect("criterion's estimates");
            (
                value["median"]["point_estimate"]
                    .as_f64()
                    .expect("a median"),
                value["median_abs_dev"]["point_estimate"]
                    .as_f64()
                    .expect("a MAD"),
            )
        };
        println!();
        println!("criterion (per class and variant; µs):");
        println!(
            "{:<24} {:>10} {:>8} {:>10} {:>8} {:>10} {:>8} {:>9}",
            "class", "wasm", "MAD", "no-op", "MAD", "native", "MAD", "wasm/noop"
        );
        for prepared in &cases {
            let class = prepared.case.class;
            let (wasm, wasm_mad) = estimate(class, "wasm");
            let (floor, floor_mad) = estimate(class, "noop");
            let (native, native_mad) = estimate(class, "native");
            println!(
                "{:<24} {:>10.2} {:>8.2} {:>10.2} {:>8.2} {:>10.2} {:>8.2} {:>8.2}x",
                class,
                wasm / 1e3,
                wasm_mad / 1e3,
                floor / 1e3,
                floor_mad / 1e3,
                native / 1e3,
                native_mad / 1e3,
                wasm / floor
            );
        }
    }
    let pair = cases
        .iter()
        .position(|prepared| prepared.case.class == SETTINGS_PAIR)
        .expect("the settings-only pair");
    println!();
    println!(
        "interleaved ({ROUNDS} rounds, every variant in turn, ~{} ms batches; medians over the rounds, ratios = medians of per-round ratios; host = the test host answering the host calls, natively):",
        BATCH_TARGET.as_millis()
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>10} {:>12} {:>24}",
        "class", "wasm µs", "no-op µs", "host µs", "wasm/noop", "vs settings", "goal"
    );
    for (prepared, class) in cases.iter().zip(&rounds) {
        let ratio = per_round_ratio(&class.ours, &class.noop);
        let versus = per_round_ratio(&class.ours, &rounds[pair].ours);
        let verdict = |met: bool| if met { "met" } else { "MISSED" };
        let goal = match prepared.case.role {
            Role::SettingsGoal => format!(
                "wasm/noop <= {SETTINGS_GOAL}: {}",
                verdict(ratio <= SETTINGS_GOAL)
            ),
            Role::ContextAware if prepared.case.baselines == Some(100) => format!(
                "vs settings <= {CONTEXT_AWARE_GOAL}: {}",
                verdict(versus <= CONTEXT_AWARE_GOAL)
            ),
            _ => "-".to_owned(),
        };
        println!(
            "{:<24} {:>10.2} {:>10.2} {:>10.2} {:>9.2}x {:>11.2}x {:>24}",
            prepared.case.class,
            median(class.ours.clone()) / 1e3,
            median(class.noop.clone()) / 1e3,
            median(class.host.clone()) / 1e3,
            ratio,
            versus,
            goal
        );
    }
}
