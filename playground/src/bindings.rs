//! The functions the page imports (`pkg/namespace_baseline_playground.js`). Each takes the
//! editors' text and returns one JSON document: the page never sees a Rust panic or a
//! thrown error for bad input, only answers with `errors`.

use serde::Serialize;
use wasm_bindgen::prelude::wasm_bindgen;

use crate::answers::evaluate::EvaluateInput;

/// [`crate::answers::evaluate::evaluate()`] as JSON (an [`crate::Evaluation`]).
#[wasm_bindgen(js_name = evaluate)]
pub fn evaluate(
    settings: &str,
    baselines: &str,
    host_error: &str,
    objects: &str,
    request: &str,
) -> String {
    to_json(&crate::answers::evaluate::evaluate(&EvaluateInput {
        settings,
        baselines,
        host_error,
        objects,
        request,
    }))
}

/// [`crate::answers::cluster::inspect_cluster()`] as JSON (a [`crate::ClusterView`]).
#[wasm_bindgen(js_name = inspectCluster)]
pub fn inspect_cluster(baselines: &str, objects: &str) -> String {
    to_json(&crate::answers::cluster::inspect_cluster(
        baselines, objects,
    ))
}

/// [`crate::answers::wall::render_wall()`] as JSON (a [`crate::WallView`]).
#[wasm_bindgen(js_name = renderWall)]
pub fn render_wall(baselines: &str, baseline: &str, namespace: &str) -> String {
    to_json(&crate::answers::wall::render_wall(
        baselines, baseline, namespace,
    ))
}

/// [`crate::answers::convert::to_yaml()`] as JSON (a [`crate::Converted`]).
#[wasm_bindgen(js_name = toYaml)]
pub fn to_yaml(text: &str) -> String {
    to_json(&crate::answers::convert::to_yaml(text))
}

/// The crate version, shown in the page footer.
#[wasm_bindgen(js_name = version)]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

/// An answer as the JSON the page reads. Serializing these types cannot fail (strings,
/// numbers and lists only); if it ever did, the page still gets an error it can show.
pub fn to_json<T: Serialize>(answer: &T) -> String {
    serde_json::to_string(answer).unwrap_or_else(|error| {
        serde_json::json!({
            "outcome": "inputError",
            "errors": [{"field": "request", "message": format!("internal error: {error}")}],
        })
        .to_string()
    })
}
