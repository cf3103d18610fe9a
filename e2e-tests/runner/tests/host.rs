//! The host's own behaviour, against a tiny hand-written waPC guest (WebAssembly text, which
//! wasmtime compiles directly): traps, deadlines, guest errors and unexpected host calls must
//! come back as what they are, and never poison the next evaluation.

use std::time::Duration;

use namespace_baseline_e2e::{CallOutcome, Cluster, PolicyHost};
use serde_json::json;

/// Dispatches on the first letter of the operation: `trap` executes `unreachable`, `loop`
/// spins forever, `host` asks for a host capability no policy here needs (then answers),
/// `error` returns a guest error, anything else answers an accepting ValidationResponse.
const GUEST: &str = r#"
(module
  (import "wapc" "__guest_request" (func $guest_request (param i32 i32)))
  (import "wapc" "__guest_response" (func $guest_response (param i32 i32)))
  (import "wapc" "__guest_error" (func $guest_error (param i32 i32)))
  (import "wapc" "__host_call"
    (func $host_call (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 1024) "kubewarden")
  (data (i32.const 1040) "net")
  (data (i32.const 1050) "v1/dns_lookup_host")
  (data (i32.const 1100) "{\"accepted\":true,\"message\":null}")
  (data (i32.const 1200) "refused")
  (func (export "__guest_call") (param $op_len i32) (param $msg_len i32) (result i32)
    (local $first i32)
    (call $guest_request (i32.const 0) (i32.const 2048))
    (local.set $first (i32.load8_u (i32.const 0)))
    (if (i32.eq (local.get $first) (i32.const 116)) (then unreachable))
    (if (i32.eq (local.get $first) (i32.const 108)) (then (loop $spin (br $spin))))
    (if (i32.eq (local.get $first) (i32.const 104))
      (then (drop (call $host_call
        (i32.const 1024) (i32.const 10) (i32.const 1040) (i32.const 3)
        (i32.const 1050) (i32.const 18) (i32.const 2048) (local.get $msg_len)))))
    (if (i32.eq (local.get $first) (i32.const 101))
      (then (call $guest_error (i32.const 1200) (i32.const 7)) (return (i32.const 0))))
    (call $guest_response (i32.const 1100) (i32.const 32))
    (i32.const 1)))
"#;

fn host() -> PolicyHost {
    PolicyHost::with_timeout(GUEST.as_bytes(), Duration::from_millis(200)).expect("guest loads")
}

fn still_answers(host: &mut PolicyHost) {
    let evaluation = host
        .validate(&json!({}), &json!({}), &[])
        .expect("a fresh instance answers");
    assert!(evaluation.response.accepted);
}

#[test]
fn a_trap_is_reported_as_a_trap_and_the_next_call_gets_a_fresh_instance() {
    let mut host = host();
    let error = host
        .call("trap", b"{}", &Cluster::default())
        .expect_err("traps");
    assert!(error.is_trap(), "{error:?}");
    assert_eq!(error.guest_error(), None);
    still_answers(&mut host);
}

#[test]
fn a_runaway_guest_hits_the_deadline() {
    let mut host = host();
    let error = host
        .call("loop", b"{}", &Cluster::default())
        .expect_err("interrupted");
    assert!(error.is_trap(), "{error:?}");
    assert!(
        error
            .guest_message()
            .is_some_and(|m| m.contains("deadline")),
        "{error:?}"
    );
    still_answers(&mut host);
}

#[test]
fn a_guest_error_is_not_a_trap() {
    let mut host = host();
    let error = host
        .call("error", b"{}", &Cluster::default())
        .expect_err("refused");
    assert!(!error.is_trap());
    assert_eq!(error.guest_error(), Some("refused"));
    still_answers(&mut host);
}

#[test]
fn unexpected_host_calls_are_recorded_and_refused() {
    let mut host = host();
    let evaluation = host
        .call("host", br#""example.com""#, &Cluster::default())
        .expect("the guest ignores the refusal and answers");
    let calls: Vec<_> = evaluation.unexpected_calls().collect();
    assert_eq!(calls.len(), 1, "{:?}", evaluation.host_calls);
    assert_eq!(calls[0].operation, "v1/dns_lookup_host");
    assert!(matches!(&calls[0].outcome, CallOutcome::Unexpected(m)
        if m.contains("unexpected host call kubewarden/net/v1/dns_lookup_host")));
    // Recorded calls belong to one evaluation only.
    let next = host
        .call("validate", b"{}", &Cluster::default())
        .expect("answers");
    assert!(next.host_calls.is_empty());
}

#[test]
fn garbage_instead_of_a_module_is_a_compile_error() {
    let error = PolicyHost::new(b"\0asm\x01\0\0\0garbage").expect_err("refused");
    assert!(error.to_string().contains("cannot compile"), "{error}");
}
