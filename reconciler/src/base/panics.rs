//! Panics stay inside the reconcile that raised them: the release profile unwinds
//! (`panic = "unwind"`), and every reconcile runs inside [`contain`], so a bug in one
//! reconcile is reported as an error and retried, while the process and the other reconciles
//! go on.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::base::error::{Error, Result};

/// Runs `future`; a panic inside it becomes [`Error::Panicked`] with the panic's message.
pub async fn contain<T>(future: impl Future<Output = T>) -> Result<T> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .map_err(|payload| Error::Panicked(message(payload.as_ref())))
}

fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// `self-check`: proves, in the binary as built, that a panic is contained. A binary built
/// with `panic = "abort"` dies here with SIGABRT instead of printing.
pub async fn self_check() -> Result<String> {
    // The default hook would print the panic as if something had gone wrong.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = contain(async { panic!("self-check") }).await;
    std::panic::set_hook(hook);
    match outcome {
        Err(Error::Panicked(message)) if message == "self-check" => {
            Ok("panics unwind: a panicking reconcile is contained and reported".to_owned())
        }
        other => Err(Error::Panicked(format!(
            "self-check: the panic was not contained as expected: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_an_error_with_its_message() {
        let formatted = contain(async { panic!("bad {}", 42) }).await;
        assert!(matches!(formatted, Err(Error::Panicked(m)) if m == "bad 42"));
        let literal = contain(async { panic!("literal") }).await;
        assert!(matches!(literal, Err(Error::Panicked(m)) if m == "literal"));
        assert!(matches!(contain(async { 7 }).await, Ok(7)));
    }

    #[tokio::test]
    async fn self_check_passes_where_panics_unwind() {
        assert!(self_check().await.is_ok());
    }
}
