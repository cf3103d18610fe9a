//! The playground's modules stay in layers with arrows pointing one way: a file imports from
//! its own layer and from those below, never from above, and no files import each other in a
//! circle. The layer order is declared here, once; the check is the workspace's one
//! (`namespace-baseline-layers`). `make layers` prints the graph of every layered crate.

use std::path::Path;

use namespace_baseline_layers::{Layer, assert_layered};

/// The layers, top to bottom: a file may import from its own layer and from those below.
const LAYERS: &[Layer] = &[
    (
        "bindings",
        "the functions the page imports (wasm-bindgen), answers as JSON",
    ),
    (
        "answers",
        "the page's answers: verdict, wall, cluster view, YAML for an editor",
    ),
    (
        "editors",
        "what the editors hold, read: documents, objects by kind, fields",
    ),
];

#[test]
fn the_playground_has_no_circle_and_no_back_arrow() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_layered(&src, "playground/src", LAYERS);
}
