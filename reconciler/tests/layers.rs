//! The reconciler's modules stay in layers with arrows pointing one way: a file imports from
//! its own layer and from those below, never from above, and no files import each other in a
//! circle. The layer order is declared here, once; the check is the workspace's one
//! (`namespace-baseline-layers`). `make layers` prints the graph of every layered crate.

use std::path::Path;

use namespace_baseline_layers::{Layer, assert_layered};

/// The layers, top to bottom: a file may import from its own layer and from those below.
const LAYERS: &[Layer] = &[
    ("commands", "the one-shot commands: plan, api-door, crd"),
    (
        "runtime",
        "the process: command line, run, HTTP, API client, logs",
    ),
    (
        "reconcile",
        "one leadership term's controller: reconcile, status, writes",
    ),
    (
        "view",
        "the term's view of the cluster: caches, triggers, scope, unseen writes",
    ),
    (
        "base",
        "what every layer uses: Error, metrics, retries, panics",
    ),
];

#[test]
fn the_reconciler_has_no_circle_and_no_back_arrow() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_layered(&src, "reconciler/src", LAYERS);
}
