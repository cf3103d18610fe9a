//! Hostile input: thousands of malformed and adversarial `validate` payloads, generated from a
//! fixed seed, through the built `policy.wasm` in the waPC host. Every one must get an answer
//! (a ValidationResponse, or a guest error for a payload that is not a validation request at
//! all), never a trap or a deadline; hostile padding around a request the policy rejects must
//! not turn the rejection into an admission; and the instance's linear memory must stay
//! bounded (under 64 MiB, enforced by the host, and not growing on a second identical pass).
//!
//! Needs the built module: `POLICY_WASM`, else `policy.wasm` at the repository root (`make
//! policy.wasm`). Without it the test fails; it never skips.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use namespace_baseline_e2e::{Cluster, HostOptions, PolicyHost, VALIDATE, ValidationResponse};
use namespace_baseline_formats::fixture;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Map, Value, json};

/// Requests per pass (two identical passes are run).
const CASES: usize = 5_200;
const SEED: u64 = 0x5EED_0BAD_F00D_0001;
/// The instance may never grow its linear memory past this (the host refuses, the guest
/// would trap); the test also asserts it is not reached.
const MEMORY_LIMIT: usize = 64 << 20;
/// A 1 MiB string, for oversized names and values.
const HUGE: usize = 1 << 20;
/// Labels in a huge label map.
const MANY_LABELS: usize = 10_000;
/// Nesting depths around and far beyond serde_json's recursion limit (128).
const DEPTHS: [usize; 13] = [
    64, 100, 120, 125, 126, 127, 128, 129, 130, 200, 1_000, 10_000, 100_000,
];
/// Stands for a piece of raw JSON text spliced in after serialisation.
const PLACEHOLDER: &str = "__NSB_RAW_PLACEHOLDER__";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn policy_wasm() -> Vec<u8> {
    namespace_baseline_e2e::built_policy().1
}

/// Seeded: the same cases on every run.
struct Rng(StdRng);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(StdRng::seed_from_u64(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.random()
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn word(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-";
        (0..len.max(1))
            .map(|i| {
                let c = ALPHABET[self.below(ALPHABET.len() - usize::from(i == 0))];
                char::from(c)
            })
            .collect()
    }
}

/// A realistic request the hostile cases start from: a fixture, with its verdict.
struct Base {
    name: &'static str,
    settings: Value,
    request: Value,
    cluster: Cluster,
    allowed: bool,
}

const BASES: [&str; 9] = [
    "policy-delete-managed-deny-all",
    "policy-update-annotation-only",
    "policy-update-deny-all-egress-added",
    "policy-create-managed-labels-by-user",
    "namespace-remove-guard-label",
    "ca-namespace-leaves-live-baseline",
    "ca-owned-policy-delete",
    "policy-create-unmanaged",
    "namespace-other-label-change",
];

fn bases() -> Vec<Base> {
    BASES
        .iter()
        .map(|name| {
            let fixture =
                fixture::load(&repo().join(fixture::DIR), name).unwrap_or_else(|e| panic!("{e}"));
            Base {
                name,
                cluster: Cluster::from(&fixture),
                allowed: fixture.expect.allowed.expect("a verdict"),
                settings: fixture.settings,
                request: fixture.request,
            }
        })
        .collect()
}

/// What a case must come back with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Any answer: a verdict or a guest error.
    Answer,
    /// The base request's verdict, unchanged by the hostile padding.
    SameVerdict,
    /// A rejection (e.g. a lookalike of an exempt identity).
    Rejected,
    /// A guest error: the payload is not something the policy-server would ever send.
    GuestError,
}

struct Case {
    family: &'static str,
    payload: Vec<u8>,
    base: usize,
    expect: Expect,
}

/// `value` with the string `PLACEHOLDER` replaced by raw JSON text.
fn splice(value: &Value, raw: &str) -> Vec<u8> {
    let text = serde_json::to_string(value).expect("serialisable");
    let quoted = format!("\"{PLACEHOLDER}\"");
    assert!(text.contains(&quoted), "no placeholder in {text:.200}");
    text.replacen(&quoted, raw, 1).into_bytes()
}

fn payload(settings: &Value, request: &Value) -> Value {
    json!({"settings": settings, "request": request})
}

fn encode(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("serialisable")
}

/// `[[[...]]]` or `{"a":{"a":...}}` (or a mix), `depth` levels deep, as raw JSON text.
fn nested(depth: usize, style: usize) -> String {
    let mut text = String::with_capacity(depth * 6 + 4);
    let mut closers = Vec::with_capacity(depth);
    for level in 0..depth {
        let object = match style % 3 {
            0 => false,
            1 => true,
            _ => level % 2 == 0,
        };
        if object {
            text.push_str("{\"a\":");
            closers.push('}');
        } else {
            text.push('[');
            closers.push(']');
        }
    }
    text.push('0');
    while let Some(closer) = closers.pop() {
        text.push(closer);
    }
    text
}

/// The object the request's decision reads: `object` (CREATE, UPDATE) or `oldObject`.
fn main_object(request: &mut Value) -> &mut Value {
    if request["object"].is_object() {
        &mut request["object"]
    } else {
        &mut request["oldObject"]
    }
}

/// Applies `edit` to every object of the request (`object` and `oldObject`) that exists.
fn each_object(request: &mut Value, mut edit: impl FnMut(&mut Map<String, Value>)) {
    for key in ["object", "oldObject"] {
        if let Some(object) = request.get_mut(key).and_then(Value::as_object_mut) {
            edit(object);
        }
    }
}

fn labels_of(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("metadata is an object");
    metadata
        .entry("labels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("labels is an object")
}

/// Values of every JSON type but the right one.
fn wrong_values(rng: &mut Rng) -> Value {
    let choices = [
        json!(0),
        json!(-1),
        json!(1.5),
        json!(1e308),
        json!(u64::MAX),
        json!(true),
        json!(false),
        json!(""),
        json!("x"),
        json!([]),
        json!([1, "a", null, {}]),
        json!({}),
        json!({"a": [1, {"b": null}]}),
        Value::Null,
    ];
    rng.pick(&choices).clone()
}

/// Paths into the request (keys, or list indices as numbers) a wrong type is put at.
const TYPED_PATHS: [&[&str]; 22] = [
    &["uid"],
    &["kind"],
    &["kind", "kind"],
    &["kind", "group"],
    &["operation"],
    &["name"],
    &["namespace"],
    &["subResource"],
    &["dryRun"],
    &["userInfo"],
    &["userInfo", "username"],
    &["userInfo", "groups"],
    &["userInfo", "groups", "0"],
    &["object"],
    &["oldObject"],
    &["object", "metadata"],
    &["oldObject", "metadata"],
    &["object", "metadata", "labels"],
    &["oldObject", "metadata", "labels"],
    &["oldObject", "metadata", "labels", "hedronite.io/baseline"],
    &["oldObject", "metadata", "name"],
    &["object", "spec"],
];

fn set_path(value: &mut Value, path: &[&str], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        *value = new;
        return;
    };
    let mut cursor = value;
    for key in parents {
        cursor = match cursor {
            Value::Object(map) => map.entry((*key).to_owned()).or_insert_with(|| json!({})),
            Value::Array(items) => match key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                Some(item) => item,
                None => return,
            },
            _ => return,
        };
    }
    match cursor {
        Value::Object(map) => {
            map.insert((*last).to_owned(), new);
        }
        Value::Array(items) => {
            if let Some(item) = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *item = new;
            }
        }
        other => *other = json!({ *last: new }),
    }
}

/// Usernames that look like an exempt identity (the reconciler, a control-plane
/// controller) but are not it.
fn lookalike_usernames() -> Vec<String> {
    let reconciler = "system:serviceaccount:namespace-baseline:namespace-baseline-reconciler";
    let controller = "system:serviceaccount:kube-system:namespace-controller";
    vec![
        format!("{reconciler}\u{200b}"),
        format!("\u{feff}{reconciler}"),
        format!("{reconciler}\u{202e}"),
        format!("\u{202e}{reconciler}"),
        format!("{reconciler} "),
        format!("{reconciler}\u{0}"),
        reconciler.replace("baseline", "b\u{0430}seline"), // Cyrillic а
        reconciler.to_uppercase(),
        reconciler.replace(':', "\u{ff1a}"), // fullwidth colon
        format!("{controller}\u{200d}"),
        controller.replace("kube-system", "kube\u{2010}system"), // Unicode hyphen
        "system:kube-controller-manager\u{200b}".to_owned(),
        "system:masters".to_owned(),
    ]
}

/// Raw JSON string literals a strict parser refuses, or which decode to odd text.
const RAW_STRINGS: [&str; 12] = [
    r#""\ud800""#,
    r#""\udfff""#,
    r#""\ud800\u0041""#,
    r#""\udc00\ud800""#,
    r#""abc\ud83d""#,
    r#""\ud83d\ude00 emoji""#,
    r#""\u0000nul""#,
    r#""\u202egnissap\u202c""#,
    r#""zero\u200bwidth""#,
    r#""bad \x escape""#,
    r#""unterminated"#,
    r#""\uZZZZ""#,
];

/// Raw bytes that are not UTF-8 (overlong, encoded surrogate, stray continuation, 0xFF).
const BAD_UTF8: [&[u8]; 5] = [
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\x80\x80",
    b"\xf4\x90\x80\x80",
];

fn generate(rng: &mut Rng, bases: &[Base], count: usize) -> Vec<Case> {
    // (family, weight): the heavy families (MiB-sized payloads) are rare.
    const FAMILIES: [(&str, usize); 15] = [
        ("metadata-walkaround", 6),
        ("huge-labels", 1),
        ("oversized", 1),
        ("deep-ignored", 6),
        ("deep-read", 6),
        ("deep-settings", 2),
        ("wrong-type", 22),
        ("lookalike-identity", 8),
        ("unicode", 12),
        ("raw-strings", 8),
        ("missing", 10),
        ("null", 8),
        ("garbage", 10),
        ("numbers", 4),
        ("soup", 16),
    ];
    let total: usize = FAMILIES.iter().map(|(_, weight)| weight).sum();
    let mut cases = Vec::with_capacity(count);
    // Every family a few times first, then the weighted draw.
    let fixed: Vec<&'static str> = FAMILIES
        .iter()
        .flat_map(|(family, _)| std::iter::repeat_n(*family, 3))
        .collect();
    for number in 0..count {
        let family = match fixed.get(number) {
            Some(family) => *family,
            None => {
                let mut ticket = rng.below(total);
                let mut chosen = FAMILIES[0].0;
                for (family, weight) in FAMILIES {
                    if ticket < weight {
                        chosen = family;
                        break;
                    }
                    ticket -= weight;
                }
                chosen
            }
        };
        let index = rng.below(bases.len());
        cases.push(make(rng, family, index, &bases[index]));
    }
    cases
}

fn make(rng: &mut Rng, family: &'static str, index: usize, base: &Base) -> Case {
    let mut request = base.request.clone();
    let settings = base.settings.clone();
    let mut expect = Expect::SameVerdict;
    let payload = match family {
        "huge-labels" => {
            // The same 10,000 extra labels on both sides of an update: nothing the policy
            // guards changes, only the amount of reading.
            let labels: Vec<(String, String)> = (0..MANY_LABELS)
                .map(|i| {
                    (
                        format!("load{i}.example.com/k-{}", rng.word(8)),
                        rng.word(20),
                    )
                })
                .collect();
            each_object(&mut request, |object| {
                let map = labels_of(object);
                for (key, value) in &labels {
                    map.insert(key.clone(), json!(value));
                }
            });
            encode(&payload(&settings, &request))
        }
        "oversized" => {
            let huge = "n".repeat(HUGE - rng.below(64));
            let target = rng.below(7);
            match target {
                0 => request["userInfo"]["username"] = json!(huge),
                1 => request["uid"] = json!(huge),
                2 => each_object(&mut request, |object| {
                    labels_of(object).insert("team.example.com/notes".into(), json!(huge.clone()));
                }),
                3 => each_object(&mut request, |object| {
                    object["metadata"]["annotations"] = json!({"note": huge.clone()});
                }),
                4 => request["options"] = json!({"fieldManager": huge}),
                5 => {
                    // The decision reads the object's name: rejection messages quote it.
                    request["name"] = json!(huge.clone());
                    each_object(&mut request, |object| {
                        object["metadata"]["name"] = json!(huge.clone());
                    });
                }
                _ => request["userInfo"]["groups"] = json!([huge, "system:authenticated"]),
            }
            encode(&payload(&settings, &request))
        }
        "deep-ignored" => {
            // Deep nesting where the policy never reads: skipped without recursion.
            let depth = *rng.pick(&DEPTHS);
            let raw = nested(depth, rng.below(3));
            let mut outer = payload(&settings, &request);
            match rng.below(4) {
                0 => outer["request"]["options"]["x"] = json!(PLACEHOLDER),
                1 => {
                    let object = main_object(&mut outer["request"]);
                    object["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsType": "FieldsV1", "fieldsV1": PLACEHOLDER}]);
                }
                2 => outer["extra"] = json!(PLACEHOLDER),
                _ => {
                    let object = main_object(&mut outer["request"]);
                    object["status"] = json!(PLACEHOLDER);
                }
            }
            splice(&outer, &raw)
        }
        "deep-read" => {
            // Deep nesting where the policy does read (the spec is kept as JSON): within the
            // recursion limit a verdict, beyond it an unreadable request.
            expect = Expect::Answer;
            let depth = *rng.pick(&DEPTHS);
            let raw = nested(depth, rng.below(3));
            let mut outer = payload(&settings, &request);
            match rng.below(3) {
                0 => main_object(&mut outer["request"])["spec"] = json!(PLACEHOLDER),
                1 => main_object(&mut outer["request"])["spec"]["podSelector"] = json!(PLACEHOLDER),
                _ => outer["request"]["userInfo"]["groups"] = json!(PLACEHOLDER),
            }
            splice(&outer, &raw)
        }
        "deep-settings" => {
            // Settings the policy-server would have refused at load time.
            expect = Expect::GuestError;
            let depth = *rng.pick(&DEPTHS);
            let raw = nested(depth, rng.below(3));
            let mut outer = payload(&settings, &request);
            if rng.chance(50) {
                outer["settings"]["unknownField"] = json!(PLACEHOLDER);
            } else {
                outer["settings"]["guardSelectors"] = json!(PLACEHOLDER);
            }
            splice(&outer, &raw)
        }
        "wrong-type" => {
            expect = Expect::Answer;
            let path = *rng.pick(&TYPED_PATHS);
            set_path(&mut request, path, wrong_values(rng));
            if rng.chance(20) {
                let path = *rng.pick(&TYPED_PATHS);
                set_path(&mut request, path, wrong_values(rng));
            }
            encode(&payload(&settings, &request))
        }
        "metadata-walkaround" => {
            // An owner reference or a finalizer slipped onto a managed policy by an update
            // that changes nothing else: the garbage collector would delete the wall, or the
            // finalizer hold up its removal. Refused wherever the update reaches the rules;
            // elsewhere (another kind, a DELETE, an unmanaged policy) the verdict stands.
            let field = rng.pick(&["ownerReferences", "finalizers"]);
            let value = if *field == "ownerReferences" {
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": rng.word(8),
                        "uid": format!("{:08x}-0000-4000-8000-000000000000", rng.next() as u32),
                        "blockOwnerDeletion": rng.chance(50)}])
            } else {
                json!([format!("example.com/{}", rng.word(6))])
            };
            let managed_update = request["operation"] == "UPDATE"
                && request["kind"]["kind"] == "NetworkPolicy"
                && request["oldObject"]["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                    == "namespace-baseline";
            if let Some(metadata) = request
                .get_mut("object")
                .and_then(|object| object.get_mut("metadata"))
                .and_then(Value::as_object_mut)
            {
                metadata.insert((*field).to_owned(), value);
            }
            expect = if managed_update {
                Expect::Rejected
            } else {
                Expect::SameVerdict
            };
            encode(&payload(&settings, &request))
        }
        "lookalike-identity" => {
            // Only the exact identities are exempt; their lookalikes are ordinary users.
            let names = lookalike_usernames();
            request["userInfo"]["username"] = json!(rng.pick(&names));
            if rng.chance(30) {
                request["userInfo"]["groups"] = json!([
                    "system:masters\u{200b}",
                    "system:serviceaccounts:namespace-baseline"
                ]);
            }
            expect = if base.allowed {
                Expect::SameVerdict
            } else {
                Expect::Rejected
            };
            encode(&payload(&settings, &request))
        }
        "unicode" => {
            // RTL overrides, zero-width characters, combining marks, emoji and NUL in names,
            // label values and extra label keys: the guarded labels themselves are intact.
            let odd = [
                "\u{202e}ylno-daer\u{202c}",
                "zero\u{200b}width\u{200c}\u{200d}",
                "\u{feff}bom",
                "e\u{301}\u{301}\u{301}",
                "\u{1f512}\u{1f9f1}",
                "nul\u{0}byte",
                "\u{10ffff}\u{fffd}",
                "\u{61c}arabic-mark",
            ];
            let text = (*rng.pick(&odd)).to_owned();
            match rng.below(4) {
                0 => each_object(&mut request, |object| {
                    labels_of(object).insert(format!("{text}/key"), json!(text.clone()));
                }),
                1 => each_object(&mut request, |object| {
                    object["metadata"]["annotations"] = json!({ text.clone(): text.clone() });
                }),
                2 => request["userInfo"]["extra"] = json!({ text.clone(): [text.clone()] }),
                _ => request["userInfo"]["username"] = json!(format!("jane{text}@example.com")),
            }
            encode(&payload(&settings, &request))
        }
        "raw-strings" => {
            // Invalid surrogates and broken escapes, as raw JSON text, and bytes that are
            // not UTF-8 at all: a verdict when they sit in fields the policy skips, an
            // unreadable request (allowed) or payload (guest error) otherwise.
            expect = Expect::Answer;
            let mut outer = payload(&settings, &request);
            let place = rng.below(5);
            match place {
                0 => outer["request"]["userInfo"]["username"] = json!(PLACEHOLDER),
                1 => outer["request"]["uid"] = json!(PLACEHOLDER),
                2 => {
                    main_object(&mut outer["request"])["metadata"]["annotations"] =
                        json!({"a": PLACEHOLDER})
                }
                3 => {
                    main_object(&mut outer["request"])["metadata"]["labels"]["x"] =
                        json!(PLACEHOLDER)
                }
                _ => outer["request"]["options"] = json!({"fieldManager": PLACEHOLDER}),
            }
            if rng.chance(25) {
                let mut bytes = splice(&outer, "\"PLACEHOLDER\"");
                let at = bytes
                    .windows(11)
                    .position(|w| w == b"PLACEHOLDER")
                    .expect("marker");
                let bad = *rng.pick(&BAD_UTF8);
                bytes.splice(at..at + 11, bad.iter().copied());
                bytes
            } else {
                let raw: &&str = rng.pick(&RAW_STRINGS);
                splice(&outer, raw)
            }
        }
        "missing" => {
            let keys = [
                "uid",
                "name",
                "namespace",
                "dryRun",
                "options",
                "resource",
                "requestKind",
                "requestResource",
            ];
            let readable = ["kind", "operation", "userInfo", "object", "oldObject"];
            let map = request.as_object_mut().expect("a request object");
            // Fields the decision does not depend on: the verdict stays.
            for _ in 0..=rng.below(keys.len()) {
                map.remove(*rng.pick(&keys));
            }
            if rng.chance(60) {
                expect = Expect::Answer;
                for _ in 0..=rng.below(readable.len()) {
                    map.remove(*rng.pick(&readable));
                }
            }
            let mut outer = payload(&settings, &request);
            if rng.chance(10) {
                expect = Expect::Answer;
                let top = outer.as_object_mut().expect("payload");
                top.remove(*rng.pick(&["request", "settings"]));
            }
            encode(&outer)
        }
        "null" => {
            expect = Expect::Answer;
            let mut outer = payload(&settings, &request);
            let paths: [&[&str]; 12] = [
                &["request"],
                &["settings"],
                &["request", "object"],
                &["request", "oldObject"],
                &["request", "object", "metadata"],
                &["request", "oldObject", "metadata"],
                &["request", "object", "metadata", "labels"],
                &["request", "oldObject", "metadata", "labels"],
                &["request", "object", "spec"],
                &["request", "userInfo"],
                &["request", "userInfo", "groups"],
                &["request", "kind"],
            ];
            for _ in 0..=rng.below(2) {
                let path = *rng.pick(&paths);
                set_path(&mut outer, path, Value::Null);
            }
            encode(&outer)
        }
        "garbage" => {
            expect = Expect::Answer;
            let whole = encode(&payload(&settings, &request));
            match rng.below(8) {
                0 => (0..rng.below(512))
                    .map(|_| (rng.next() & 0xff) as u8)
                    .collect(),
                1 => whole[..rng.below(whole.len())].to_vec(),
                2 => rng
                    .pick(&[
                        &b"[]"[..],
                        b"1",
                        b"\"x\"",
                        b"null",
                        b"true",
                        b"",
                        b" ",
                        b"{",
                        b"}",
                    ])
                    .to_vec(),
                3 => [b"\xef\xbb\xbf".as_slice(), &whole].concat(),
                4 => [whole.as_slice(), b" trailing"].concat(),
                5 => {
                    // Duplicate keys: the second `operation` contradicts the first.
                    let text = String::from_utf8(whole).expect("utf-8");
                    text.replacen(
                        "\"operation\":",
                        "\"operation\":\"CONNECT\",\"operation\":",
                        1,
                    )
                    .into_bytes()
                }
                6 => {
                    let text = String::from_utf8(whole).expect("utf-8");
                    text.replacen("\"request\":", "\"request\":[", 1)
                        .into_bytes()
                }
                _ => {
                    let mut bytes = whole;
                    for _ in 0..=rng.below(8) {
                        let at = rng.below(bytes.len());
                        bytes[at] = (rng.next() & 0xff) as u8;
                    }
                    bytes
                }
            }
        }
        "numbers" => {
            expect = Expect::Answer;
            let raw = rng.pick(&[
                "1e400",
                "-1e400",
                "123456789012345678901234567890",
                "-0.0",
                "0.000000000000000000000000000000000000001e-400",
                "NaN",
                "Infinity",
                "01",
                "1.",
                "-",
            ]);
            let mut outer = payload(&settings, &request);
            match rng.below(3) {
                0 => main_object(&mut outer["request"])["spec"]["port"] = json!(PLACEHOLDER),
                1 => outer["request"]["options"] = json!({"gracePeriodSeconds": PLACEHOLDER}),
                _ => outer["request"]["dryRun"] = json!(PLACEHOLDER),
            }
            splice(&outer, raw)
        }
        "soup" => {
            // A random JSON document where the request (or a part of it) should be.
            expect = Expect::Answer;
            let soup = random_value(rng, 6);
            if rng.chance(50) {
                encode(&payload(&settings, &soup))
            } else {
                let path = *rng.pick(&TYPED_PATHS);
                set_path(&mut request, path, soup);
                encode(&payload(&settings, &request))
            }
        }
        other => unreachable!("family {other}"),
    };
    Case {
        family,
        payload,
        base: index,
        expect,
    }
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(i64::try_from(rng.next() >> 1).unwrap_or(0) - (1 << 40)),
        3 => {
            let len = rng.below(24);
            json!(rng.word(len))
        }
        4 => json!(*rng.pick(&[
            "CREATE",
            "UPDATE",
            "DELETE",
            "CONNECT",
            "NetworkPolicy",
            "Namespace",
            "networking.k8s.io",
            "namespace-baseline",
            "guarded"
        ])),
        5 => Value::Array(
            (0..rng.below(6))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "uid",
                "kind",
                "operation",
                "userInfo",
                "object",
                "oldObject",
                "metadata",
                "labels",
                "spec",
                "name",
                "namespace",
                "group",
                "username",
                "groups",
                "dryRun",
            ];
            let mut map = Map::new();
            for _ in 0..rng.below(8) {
                let key = if rng.chance(70) {
                    (*rng.pick(&keys)).to_owned()
                } else {
                    rng.word(6)
                };
                map.insert(key, random_value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

/// What one case came back with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Allowed,
    Rejected,
    GuestError,
}

#[derive(Default)]
struct Tally {
    by_family: BTreeMap<&'static str, BTreeMap<Outcome, usize>>,
    /// The outcome of each case, in order (`None`: no answer).
    outcomes: Vec<Option<Outcome>>,
    failures: Vec<String>,
    largest_payload: usize,
    slowest: Duration,
    longest_message: usize,
}

fn run_pass<C: std::borrow::Borrow<Case>>(
    host: &mut PolicyHost,
    bases: &[Base],
    cases: &[C],
) -> Tally {
    let mut tally = Tally::default();
    for (number, case) in cases.iter().enumerate() {
        tally.outcomes.push(None);
        let case: &Case = case.borrow();
        let base = &bases[case.base];
        tally.largest_payload = tally.largest_payload.max(case.payload.len());
        let describe = || {
            let preview =
                String::from_utf8_lossy(&case.payload[..case.payload.len().min(160)]).into_owned();
            format!(
                "case {number} ({}, base {}, {} bytes): {preview}",
                case.family,
                base.name,
                case.payload.len()
            )
        };
        let outcome = match host.call(VALIDATE, &case.payload, &base.cluster) {
            Ok(evaluation) => {
                tally.slowest = tally.slowest.max(evaluation.elapsed);
                if let Some(call) = evaluation.unexpected_calls().next() {
                    tally
                        .failures
                        .push(format!("{}: unexpected host call {call}", describe()));
                }
                match serde_json::from_slice::<ValidationResponse>(&evaluation.response) {
                    Ok(response) => {
                        if response.mutated_object.is_some() {
                            tally
                                .failures
                                .push(format!("{}: a validating policy mutated", describe()));
                        }
                        tally.longest_message = tally
                            .longest_message
                            .max(response.message.as_ref().map_or(0, String::len));
                        if response.accepted {
                            Outcome::Allowed
                        } else {
                            Outcome::Rejected
                        }
                    }
                    Err(error) => {
                        tally.failures.push(format!(
                            "{}: not a ValidationResponse ({error}): {}",
                            describe(),
                            String::from_utf8_lossy(&evaluation.response)
                        ));
                        continue;
                    }
                }
            }
            Err(error) if error.guest_error().is_some() => Outcome::GuestError,
            Err(error) => {
                tally.failures.push(format!(
                    "{}: no answer: {error}: {:?}",
                    describe(),
                    error.guest_message()
                ));
                continue;
            }
        };
        let expected_verdict = if base.allowed {
            Outcome::Allowed
        } else {
            Outcome::Rejected
        };
        let wrong = match case.expect {
            Expect::Answer => false,
            Expect::SameVerdict => outcome != expected_verdict,
            Expect::Rejected => outcome != Outcome::Rejected,
            Expect::GuestError => outcome != Outcome::GuestError,
        };
        if wrong {
            tally.failures.push(format!(
                "{}: expected {:?} (base verdict allowed={}), got {outcome:?}",
                describe(),
                case.expect,
                base.allowed
            ));
        }
        *tally
            .by_family
            .entry(case.family)
            .or_default()
            .entry(outcome.clone())
            .or_default() += 1;
        tally.outcomes[number] = Some(outcome);
    }
    tally
}

#[test]
fn thousands_of_hostile_requests_all_get_an_answer_in_bounded_memory() {
    let started = Instant::now();
    let wasm = policy_wasm();
    let bases = bases();
    // As the policy-server runs it: epoch deadline (2 s), and here a 64 MiB memory cap.
    let mut host = PolicyHost::with_options(
        &wasm,
        HostOptions {
            max_memory: Some(MEMORY_LIMIT),
            ..HostOptions::default()
        },
    )
    .expect("the policy module loads");
    // The same, with the linear memory allocated by the host so that its size can be read
    // (no epoch interruption there: the deadline is checked as each call returns).
    let mut measured = PolicyHost::with_options(
        &wasm,
        HostOptions {
            max_memory: Some(MEMORY_LIMIT),
            track_memory: true,
            ..HostOptions::default()
        },
    )
    .expect("the policy module loads with tracked memory");
    let at_start = measured.memory_size().expect("tracked memory");

    // The bases themselves reach their fixtures' verdicts.
    for base in &bases {
        let evaluation = host
            .validate_in(&base.settings, &base.request, &base.cluster)
            .unwrap_or_else(|error| panic!("base {}: {error}", base.name));
        assert_eq!(
            evaluation.response.accepted, base.allowed,
            "base {}: {:?}",
            base.name, evaluation.response.message
        );
    }

    let mut rng = Rng::new(SEED);
    let cases = generate(&mut rng, &bases, CASES);
    let generated_in = started.elapsed();
    // The generator is deterministic (a prefix regenerated from the seed is identical).
    let mut rng = Rng::new(SEED);
    let prefix = generate(&mut rng, &bases, 500);
    assert!(
        prefix
            .iter()
            .zip(&cases)
            .all(|(a, b)| a.payload == b.payload),
        "the generator is not deterministic"
    );
    drop(prefix);
    let pass_started = Instant::now();
    let real = run_pass(&mut host, &bases, &cases);
    let real_took = pass_started.elapsed();

    // Memory: the host replaces the instance after every failed call (a guest error
    // included), so the measured passes run the requests answered with a verdict, on one
    // instance from start to end: twice the same input, the heap must not grow.
    let verdicts: Vec<&Case> = cases
        .iter()
        .zip(&real.outcomes)
        .filter(|(_, outcome)| matches!(outcome, Some(Outcome::Allowed | Outcome::Rejected)))
        .map(|(case, _)| case)
        .collect();
    let first = run_pass(&mut measured, &bases, &verdicts);
    let after_first = measured.memory_size().expect("tracked memory");
    let second = run_pass(&mut measured, &bases, &verdicts);
    let after_second = measured.memory_size().expect("tracked memory");
    let again = &cases;
    let mut outcomes: BTreeMap<Outcome, usize> = BTreeMap::new();
    for counts in real.by_family.values() {
        for (outcome, count) in counts {
            *outcomes.entry(outcome.clone()).or_default() += count;
        }
    }
    let total_bytes: usize = again.iter().map(|case| case.payload.len()).sum();
    eprintln!(
        "hostile: {} generated requests ({} MiB) in {:.1?} (generated in {generated_in:.1?}, policy-server-like pass {real_took:.1?}, then the {} verdicts twice with tracked memory); outcomes {outcomes:?}; largest payload {} bytes, slowest evaluation {:.1?}, longest message {} bytes",
        again.len(),
        total_bytes >> 20,
        started.elapsed(),
        verdicts.len(),
        real.largest_payload,
        real.slowest.max(first.slowest).max(second.slowest),
        real.longest_message
    );
    for (family, counts) in &real.by_family {
        eprintln!("  {family:>18}: {counts:?}");
    }
    eprintln!(
        "  linear memory: {} KiB at start, {} KiB after measured pass 1, {} KiB after pass 2 (cap {} KiB); instances made by the measured host: {:?}",
        at_start >> 10,
        after_first >> 10,
        after_second >> 10,
        MEMORY_LIMIT >> 10,
        measured.instances_created()
    );

    let failures: Vec<&String> = real
        .failures
        .iter()
        .chain(&first.failures)
        .chain(&second.failures)
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} hostile requests went wrong; first ones:\n{}",
        failures.len(),
        again.len() + 2 * verdicts.len(),
        failures
            .iter()
            .take(15)
            .map(|f| format!("- {f:.600}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(again.len() >= 5_000);
    assert_eq!(
        measured.instances_created(),
        Some(1),
        "an instance was replaced: a call failed without being reported"
    );
    assert!(
        after_first < MEMORY_LIMIT,
        "linear memory reached {after_first} bytes"
    );
    assert_eq!(
        after_second, after_first,
        "linear memory grew on a second identical pass ({after_first} -> {after_second} bytes)"
    );
    let verdict_outcomes: Vec<&Option<Outcome>> = real
        .outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Some(Outcome::Allowed | Outcome::Rejected)))
        .collect();
    assert!(
        first.outcomes.iter().eq(verdict_outcomes.iter().copied()),
        "the two hosts disagree"
    );
    assert_eq!(first.outcomes, second.outcomes, "the two passes disagree");
}
