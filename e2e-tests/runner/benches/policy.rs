//! The policy against its host's floor. Every request class is evaluated in the waPC host
//! Kubewarden's policy-server embeds (wasmtime, the module compiled once and one instance
//! reused), by our `policy.wasm` and by a no-op policy (`e2e-tests/noop-policy`: same SDK,
//! same settings check, accepts every request without reading it) on the same payload, and
//! by our policy natively (`namespace_baseline_policy::evaluate`, the same bytes).
//!
//! One run measures twice:
//! 1. criterion, one benchmark per class and variant: medians and median absolute deviations;
//! 2. an interleaved pass: in each of [`ROUNDS`] rounds every wasm variant runs a batch of
//!    calls in turn; per-call medians over the rounds, and each ratio (ours / no-op,
//!    context-aware / settings-only) as the median of its per-round ratios, so that a change
//!    of load on this shared machine falls on both sides of a ratio alike.
//!
//! Then a table of both, the goals of issue 17 part 4, the modules' sizes and cold starts.
//! Run with `make bench-policy` (it builds both modules); or, after `make policy.wasm` and
//! building the no-op (see the Makefile), `cargo bench -p namespace-baseline-e2e --bench
//! policy` with `NOOP_POLICY_WASM` pointing at it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use namespace_baseline_core::admission::{BaselineSource, LiveBaseline, ObjectView};
use namespace_baseline_e2e::{Cluster, PolicyHost, VALIDATE};
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

/// The native counterpart of the host capabilities: the same answers, read by the policy's
/// own reader of host answers.
struct NativeCluster {
    list: Vec<u8>,
    namespaces: Vec<Value>,
}

impl BaselineSource for NativeCluster {
    fn baselines(&self) -> Result<Vec<LiveBaseline>, String> {
        serde_json::from_slice::<k8s_openapi::List<LiveBaseline>>(&self.list)
            .map(|list| list.items)
            .map_err(|e| e.to_string())
    }

    fn namespace(&self, name: &str) -> Result<ObjectView, String> {
        let found = self
            .namespaces
            .iter()
            .find(|namespace| namespace["metadata"]["name"] == name)
            .ok_or_else(|| format!("namespaces {name:?} not found"))?;
        let bytes = serde_json::to_vec(found).map_err(|e| e.to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

struct Prepared {
    case: &'static Case,
    payload: Vec<u8>,
    cluster: Cluster,
    native: NativeCluster,
}

fn prepare(case: &'static Case) -> Prepared {
    let fixture = fixture(case.fixture);
    let items = match case.baselines {
        Some(count) => baselines(count),
        None => fixture.baselines.clone(),
    };
    // What the host answers after the policy's field masks (name, namespaceLabel, mode).
    let masked: Vec<Value> = items
        .iter()
        .map(|item| json!({"apiVersion": item["apiVersion"], "kind": item["kind"], "metadata": {"name": item["metadata"]["name"]}, "spec": {"namespaceLabel": item["spec"]["namespaceLabel"]}}))
        .collect();
    let list = json!({"apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaselineList", "metadata": {"resourceVersion": "424242"}, "items": masked});
    let payload =
        serde_json::to_vec(&json!({"settings": fixture.settings, "request": fixture.request}))
            .expect("a JSON payload");
    let native = NativeCluster {
        list: serde_json::to_vec(&list).expect("a JSON list"),
        namespaces: fixture.namespaces.clone(),
    };
    let mut cluster = Cluster::from(&fixture);
    cluster.baselines = items;
    Prepared {
        case,
        payload,
        cluster,
        native,
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

/// Per-call nanoseconds of `calls` evaluations.
fn time_batch(host: &mut PolicyHost, prepared: &Prepared, calls: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        host.call(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer");
    }
    started.elapsed().as_nanos() as f64 / calls as f64
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Module {
    Ours,
    Noop,
}

/// The interleaved pass: per-round per-call nanoseconds, `[case][module]`.
fn interleaved(
    ours: &mut PolicyHost,
    noop: &mut PolicyHost,
    cases: &[Prepared],
) -> Vec<[Vec<f64>; 2]> {
    let mut batches = Vec::new();
    for prepared in cases {
        let mut sizes = [0; 2];
        for (slot, host) in [&mut *ours, &mut *noop].into_iter().enumerate() {
            let once = time_batch(host, prepared, 3);
            sizes[slot] = ((BATCH_TARGET.as_nanos() as f64 / once).ceil() as usize).max(1);
        }
        batches.push(sizes);
    }
    let mut samples: Vec<[Vec<f64>; 2]> = cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for _ in 0..ROUNDS {
        for (index, prepared) in cases.iter().enumerate() {
            samples[index][0].push(time_batch(ours, prepared, batches[index][0]));
            samples[index][1].push(time_batch(noop, prepared, batches[index][1]));
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
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    let (ours_path, ours_wasm) = module(
        "POLICY_WASM",
        repo().join("policy.wasm"),
        "make policy.wasm",
    );
    let (noop_path, noop_wasm) = module(
        "NOOP_POLICY_WASM",
        target.join("wasm32-wasip1/policy/namespace_baseline_noop_policy.wasm"),
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
            .call(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer");
        assert_eq!(accepted(&wasm.response), allowed, "{}", case.class);
        let expected_calls = match case.role {
            Role::ContextAware | Role::Holes => 1,
            Role::SettingsGoal | Role::SettingsInfo => 0,
        };
        assert_eq!(
            wasm.capability_calls().count(),
            expected_calls,
            "{}",
            case.class
        );
        let native = namespace_baseline_policy::evaluate(&prepared.payload, &prepared.native)
            .expect("a verdict");
        assert_eq!(native.is_allowed(), allowed, "{}", case.class);
        let floor = noop
            .call(VALIDATE, &prepared.payload, &prepared.cluster)
            .expect("an answer");
        assert!(accepted(&floor.response), "the no-op accepts");

        let mut group = criterion.benchmark_group(case.class);
        group.bench_function(BenchmarkId::from_parameter("wasm"), |b| {
            b.iter(|| {
                ours.call(VALIDATE, &prepared.payload, &prepared.cluster)
                    .unwrap()
            })
        });
        group.bench_function(BenchmarkId::from_parameter("noop"), |b| {
            b.iter(|| {
                noop.call(VALIDATE, &prepared.payload, &prepared.cluster)
                    .unwrap()
            })
        });
        group.bench_function(BenchmarkId::from_parameter("native"), |b| {
            b.iter(|| {
                namespace_baseline_policy::evaluate(&prepared.payload, &prepared.native).unwrap()
            })
        });
        group.finish();
    }
    criterion.final_summary();

    let rounds = interleaved(&mut ours, &mut noop, &cases);
    let load_after = load_average();

    let estimate = |class: &str, variant: &str| -> (f64, f64) {
        let file = output.join(class).join(variant).join("new/estimates.json");
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
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
    let pair = cases
        .iter()
        .position(|prepared| prepared.case.class == SETTINGS_PAIR)
        .expect("the settings-only pair");

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
    println!();
    println!(
        "interleaved ({ROUNDS} rounds, every variant in turn, ~{} ms batches; medians over the rounds, ratios = medians of per-round ratios):",
        BATCH_TARGET.as_millis()
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>14} {:>26}",
        "class", "wasm µs", "no-op µs", "wasm/noop", "vs settings", "goal"
    );
    for (index, prepared) in cases.iter().enumerate() {
        let [ours_rounds, noop_rounds] = &rounds[index];
        let ratio = per_round_ratio(ours_rounds, noop_rounds);
        let versus = per_round_ratio(ours_rounds, &rounds[pair][0]);
        let goal = match prepared.case.role {
            Role::SettingsGoal => format!(
                "wasm/noop ≤ {SETTINGS_GOAL}: {}",
                if ratio <= SETTINGS_GOAL {
                    "met"
                } else {
                    "MISSED"
                }
            ),
            Role::ContextAware if prepared.case.baselines == Some(100) => format!(
                "vs settings ≤ {CONTEXT_AWARE_GOAL}: {}",
                if versus <= CONTEXT_AWARE_GOAL {
                    "met"
                } else {
                    "MISSED"
                }
            ),
            _ => "-".to_owned(),
        };
        println!(
            "{:<24} {:>10.2} {:>10.2} {:>9.2}x {:>13.2}x {:>26}",
            prepared.case.class,
            median(ours_rounds.clone()) / 1e3,
            median(noop_rounds.clone()) / 1e3,
            ratio,
            versus,
            goal
        );
    }
}
