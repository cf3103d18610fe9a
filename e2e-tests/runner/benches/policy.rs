//! The policy's evaluation cost per request class, in the waPC host (wasmtime, module
//! compiled once, instance reused, as Kubewarden's policy-server does) and called natively,
//! measured with criterion in one run; then a table of medians, spreads and the wasm/native
//! ratio, plus the module's cold start and size.
//!
//! Run with `make bench-policy` (or `cargo bench -p namespace-baseline-e2e --bench policy`
//! after `make policy.wasm`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use namespace_baseline_core::admission::{BaselineSource, LiveBaseline, ObjectView};
use namespace_baseline_e2e::{Cluster, PolicyHost};
use namespace_baseline_formats::fixture::{self, Fixture};
use serde_json::{Value, json};

/// One request class: a fixture, and for the context-aware class the cluster's baselines.
struct Case {
    class: &'static str,
    fixture: &'static str,
    baselines: Option<usize>,
}

const CASES: &[Case] = &[
    Case {
        class: "np-delete-managed",
        fixture: "policy-delete-managed-deny-all",
        baselines: None,
    },
    Case {
        class: "np-update-managed",
        fixture: "policy-update-pod-selector-narrowed",
        baselines: None,
    },
    Case {
        class: "ns-update-remove-guard",
        fixture: "namespace-remove-guard-label",
        baselines: None,
    },
    Case {
        class: "unrelated-accepted",
        fixture: "policy-create-unmanaged",
        baselines: None,
    },
    Case {
        class: "ns-update-context-aware-100",
        fixture: "ca-namespace-leaves-live-baseline",
        baselines: Some(100),
    },
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> Fixture {
    fixture::load(&repo().join(fixture::DIR), name).unwrap_or_else(|e| panic!("{e}"))
}

/// `count` baselines as the policy-server hands them over after the policy's field masks;
/// the one that guards the fixture's namespace comes last, so every one is scanned.
fn baselines(count: usize) -> Vec<Value> {
    (1..count)
        .map(|i| json!({"metadata": {"name": format!("team-{i}")}, "spec": {"namespaceLabel": format!("team-{i}=walled")}}))
        .chain([json!({"metadata": {"name": "internal-zone"}, "spec": {"namespaceLabel": "zone=internal"}})])
        .collect()
}

/// The native counterpart of the host capabilities: the same JSON, parsed the same way.
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
    class: &'static str,
    baselines: Option<usize>,
    settings: Value,
    request: Value,
    payload: Vec<u8>,
    cluster: Cluster,
    native: NativeCluster,
    allowed: bool,
}

fn prepare(case: &Case) -> Prepared {
    let fixture = fixture(case.fixture);
    let items = match case.baselines {
        Some(count) => baselines(count),
        None => fixture.baselines.clone(),
    };
    let list = json!({"apiVersion": "hedronite.io/v1alpha1", "kind": "NamespaceBaselineList", "metadata": {}, "items": items});
    let namespaces = fixture.namespaces.clone();
    Prepared {
        class: case.class,
        baselines: case.baselines,
        payload: serde_json::to_vec(
            &json!({"settings": fixture.settings, "request": fixture.request}),
        )
        .unwrap(),
        settings: fixture.settings,
        request: fixture.request,
        cluster: Cluster {
            baselines: items,
            namespaces: namespaces.clone(),
            host_error: None,
        },
        native: NativeCluster {
            list: serde_json::to_vec(&list).unwrap(),
            namespaces,
        },
        allowed: fixture.expect.allowed.expect("expect.allowed"),
    }
}

fn wasm_path() -> PathBuf {
    std::env::var_os("POLICY_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("policy.wasm"))
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let wasm_path = wasm_path();
    let wasm = std::fs::read(&wasm_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run `make policy.wasm` first)",
            wasm_path.display()
        )
    });
    let output = Path::new(env!("CARGO_TARGET_TMPDIR")).join("criterion");
    let mut criterion = Criterion::default()
        .output_directory(&output)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();

    // Cold start: compile + instantiate, as a policy-server does once per policy.
    let cold: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            PolicyHost::new(&wasm).expect("the module loads");
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();

    let mut host = PolicyHost::new(&wasm).expect("the module loads");
    let cases: Vec<Prepared> = CASES.iter().map(prepare).collect();
    for case in &cases {
        // Both paths must reach the fixture's verdict before they are timed.
        let wasm_verdict = host
            .validate_in(&case.settings, &case.request, &case.cluster)
            .unwrap();
        assert_eq!(
            wasm_verdict.response.accepted, case.allowed,
            "{}",
            case.class
        );
        let native = namespace_baseline_policy::evaluate(&case.payload, &case.native).unwrap();
        assert_eq!(native.is_allowed(), case.allowed, "{}", case.class);

        let mut group = criterion.benchmark_group(case.class);
        group.bench_function(BenchmarkId::from_parameter("wasm"), |b| {
            b.iter(|| host.call("validate", &case.payload, &case.cluster).unwrap())
        });
        group.bench_function(BenchmarkId::from_parameter("native"), |b| {
            b.iter(|| namespace_baseline_policy::evaluate(&case.payload, &case.native).unwrap())
        });
        if case.baselines.is_some() {
            // Where the context-aware time goes: reading the host's answer alone.
            group.bench_function(BenchmarkId::from_parameter("native-read-baselines"), |b| {
                b.iter(|| case.native.baselines().unwrap())
            });
        }
        group.finish();
    }
    criterion.final_summary();

    println!();
    println!(
        "policy.wasm: {} bytes; cold start (compile + instantiate): median {:.1} ms over 5",
        wasm.len(),
        median(cold)
    );
    println!(
        "{:<30} {:>14} {:>14} {:>14} {:>14} {:>8}",
        "class", "wasm median", "wasm MAD", "native median", "native MAD", "ratio"
    );
    for case in &cases {
        let estimate = |path: &str| -> (f64, f64) {
            let file = output
                .join(case.class)
                .join(path)
                .join("new/estimates.json");
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let value: Value = serde_json::from_str(&text).unwrap();
            (
                value["median"]["point_estimate"].as_f64().unwrap(),
                value["median_abs_dev"]["point_estimate"].as_f64().unwrap(),
            )
        };
        let (wasm_median, wasm_mad) = estimate("wasm");
        let (native_median, native_mad) = estimate("native");
        println!(
            "{:<30} {:>11.2} µs {:>11.2} µs {:>11.2} µs {:>11.2} µs {:>7.1}x",
            case.class,
            wasm_median / 1e3,
            wasm_mad / 1e3,
            native_median / 1e3,
            native_mad / 1e3,
            wasm_median / native_median
        );
        if case.baselines.is_some() {
            let (read, _) = estimate("native-read-baselines");
            println!(
                "{:<30} {:>14} {:>14} {:>11.2} µs {:>14} {:>7.0}%",
                "  of which: read the list",
                "",
                "",
                read / 1e3,
                "",
                100.0 * read / native_median
            );
        }
    }
}
