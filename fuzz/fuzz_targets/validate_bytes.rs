//! Arbitrary bytes as the `validate` payload: never a panic, and the invariants hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    for fail in [false, true] {
        let verdict = namespace_baseline_policy::evaluate(data, &common::Host { fail });
        common::check_invariants(data, &verdict);
    }
});
