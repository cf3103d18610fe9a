//! Structure-aware: take a real fixture request and apply a list of mutations (labels
//! added, removed or changed, specs replaced, users, kinds and operations swapped, objects
//! nulled), then evaluate. Never a panic, the same verdict twice, and the invariants hold.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use namespace_baseline_formats::fixture::Fixture;
use serde_json::{Value, json};

#[path = "common.rs"]
mod common;

mod fixtures {
    include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));
}

const KEYS: [&str; 6] = [
    "app.kubernetes.io/managed-by",
    "hedronite.io/baseline",
    "baseline",
    "tier",
    "kubernetes.io/metadata.name",
    "team",
];
const VALUES: [&str; 5] = ["namespace-baseline", "guarded", "open", "", "b0"];
const USERS: [&str; 7] = [
    "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
    "kubernetes-admin",
    "system:serviceaccount:namespace-baseline:default",
    "bob",
];
/// Fields of `metadata` beyond the labels: the guarded ones, the ones the API server sets,
/// and one no version of Kubernetes has.
const METADATA_FIELDS: [&str; 7] = [
    "ownerReferences",
    "finalizers",
    "deletionTimestamp",
    "annotations",
    "generateName",
    "resourceVersion",
    "futureField",
];
const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", ""];
const KINDS: [(&str, &str); 4] = [
    ("networking.k8s.io", "NetworkPolicy"),
    ("", "Namespace"),
    ("", "Pod"),
    ("crd.projectcalico.org", "NetworkPolicy"),
];

#[derive(Arbitrary, Debug)]
enum Side {
    Object,
    OldObject,
}

#[derive(Arbitrary, Debug)]
enum Mutation {
    SetLabel(Side, u8, u8),
    SetLabelText(Side, u8, String),
    RemoveLabel(Side, u8),
    NullLabels(Side),
    NullObject(Side),
    CopyObject(Side),
    SetSpecField(Side, String, Json),
    SetMetadataField(Side, u8, Json),
    User(u8),
    Operation(u8),
    Kind(u8),
    DryRun(bool),
    ContextAware(bool),
    Raw(String, Json),
}

/// A small arbitrary JSON value (bounded depth, so the fuzzer explores shapes, not size).
#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Number(i64),
    Text(String),
    List(Vec<Leaf>),
    Map(Vec<(String, Leaf)>),
}

#[derive(Arbitrary, Debug)]
enum Leaf {
    Null,
    Number(i64),
    Text(String),
    EmptyMap,
}

impl Leaf {
    fn value(&self) -> Value {
        match self {
            Leaf::Null => Value::Null,
            Leaf::Number(n) => json!(n),
            Leaf::Text(t) => json!(t),
            Leaf::EmptyMap => json!({}),
        }
    }
}

impl Json {
    fn value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => json!(b),
            Json::Number(n) => json!(n),
            Json::Text(t) => json!(t),
            Json::List(items) => Value::Array(items.iter().map(Leaf::value).collect()),
            Json::Map(entries) => Value::Object(
                entries.iter().map(|(k, v)| (k.clone(), v.value())).collect(),
            ),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    fixture: u16,
    mutations: Vec<Mutation>,
    host_fails: bool,
}

fn side<'a>(request: &'a mut Value, side: &Side) -> &'a mut Value {
    match side {
        Side::Object => &mut request["object"],
        Side::OldObject => &mut request["oldObject"],
    }
}

fn labels(object: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    if !object.is_object() {
        return None;
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    if !object["metadata"]["labels"].is_object() {
        object["metadata"]["labels"] = json!({});
    }
    object["metadata"]["labels"].as_object_mut()
}

fn apply(payload: &mut Value, mutation: &Mutation) {
    let pick = |list: &[&'static str], i: u8| list[usize::from(i) % list.len()];
    let request = &mut payload["request"];
    match mutation {
        Mutation::SetLabel(s, k, v) => {
            if let Some(labels) = labels(side(request, s)) {
                labels.insert(pick(&KEYS, *k).into(), pick(&VALUES, *v).into());
            }
        }
        Mutation::SetLabelText(s, k, v) => {
            if let Some(labels) = labels(side(request, s)) {
                labels.insert(pick(&KEYS, *k).into(), v.clone().into());
            }
        }
        Mutation::RemoveLabel(s, k) => {
            if let Some(labels) = labels(side(request, s)) {
                labels.remove(pick(&KEYS, *k));
            }
        }
        Mutation::NullLabels(s) => {
            let object = side(request, s);
            if object["metadata"].is_object() {
                object["metadata"]["labels"] = Value::Null;
            }
        }
        Mutation::NullObject(s) => *side(request, s) = Value::Null,
        Mutation::CopyObject(s) => {
            let copy = match s {
                Side::Object => request["oldObject"].clone(),
                Side::OldObject => request["object"].clone(),
            };
            *side(request, s) = copy;
        }
        Mutation::SetSpecField(s, key, value) => {
            let object = side(request, s);
            if object.is_object() {
                if !object["spec"].is_object() {
                    object["spec"] = json!({});
                }
                object["spec"][key] = value.value();
            }
        }
        Mutation::SetMetadataField(s, field, value) => {
            let object = side(request, s);
            if object.is_object() {
                if !object["metadata"].is_object() {
                    object["metadata"] = json!({});
                }
                object["metadata"][pick(&METADATA_FIELDS, *field)] = value.value();
            }
        }
        Mutation::User(i) => request["userInfo"]["username"] = pick(&USERS, *i).into(),
        Mutation::Operation(i) => request["operation"] = pick(&OPERATIONS, *i).into(),
        Mutation::Kind(i) => {
            let (group, kind) = KINDS[usize::from(*i) % KINDS.len()];
            request["kind"] = json!({"group": group, "version": "v1", "kind": kind});
        }
        Mutation::DryRun(dry_run) => request["dryRun"] = (*dry_run).into(),
        Mutation::ContextAware(on) => payload["settings"]["contextAware"] = (*on).into(),
        Mutation::Raw(key, value) => {
            if request.is_object() {
                request[key.as_str()] = value.value();
            }
        }
    }
}

fuzz_target!(|input: Input| {
    // Read as every fixture is read (namespace_baseline_formats::fixture).
    let text = fixtures::FIXTURES[usize::from(input.fixture) % fixtures::FIXTURES.len()];
    let fixture = match Fixture::parse("embedded", text) {
        Ok(fixture) => fixture,
        Err(_) => return,
    };
    let mut payload = json!({"settings": fixture.settings, "request": fixture.request});
    for mutation in input.mutations.iter().take(16) {
        apply(&mut payload, mutation);
    }
    let bytes = payload.to_string().into_bytes();
    let host = common::Host { fail: input.host_fails };
    let first = namespace_baseline_policy::evaluate(&bytes, &host);
    common::check_invariants(&bytes, &first);
    assert_eq!(first, namespace_baseline_policy::evaluate(&bytes, &host), "not deterministic");
});
