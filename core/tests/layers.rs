//! The core's modules stay in layers with arrows pointing one way: a file imports from its
//! own layer and from those below, never from above, and no files import each other in a
//! circle. The layer order is declared here, once; the check is the workspace's one
//! (`namespace-baseline-layers`). `make layers` prints the graph of every layered crate.

use std::path::Path;

use namespace_baseline_layers::{Layer, assert_layered};

/// The layers, top to bottom: a file may import from its own layer and from those below.
const LAYERS: &[Layer] = &[
    (
        "report",
        "what a namespace's OpenReports Report says (the reconciler writes it)",
    ),
    (
        "decisions",
        "what each program decides: the gate's verdicts (admission), the installer's plan (plan)",
    ),
    (
        "network",
        "NetworkPolicy semantics: the rule engine, holes and reach, the wall and drift, the doors",
    ),
    (
        "vocabulary",
        "the words every layer uses: spec, selectors, identities, facts, CIDRs, JSON",
    ),
];

#[test]
fn the_core_has_no_circle_and_no_back_arrow() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_layered(&src, "core/src", LAYERS);
}
