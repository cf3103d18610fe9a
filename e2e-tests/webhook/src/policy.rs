//! The policy as the stand-in serves it: the module loaded once in the runner's waPC host
//! (checked as the policy-server checks it at start: protocol `v1`, the ClusterAdmissionPolicy's
//! settings accepted by `validate_settings`), then, per AdmissionReview, the cluster snapshot
//! read, `validate` called and its verdict translated. One evaluation at a time, like one
//! policy-server worker, on a thread that owns the host (it is not `Send`).

use std::sync::{Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use kube::Client;
use namespace_baseline_e2e::{
    Cluster, DEFAULT_TIMEOUT, Evaluation, PolicyHost, ValidationResponse,
};
use namespace_baseline_testkit::kubewarden::{ClusterAdmissionPolicy, Mode};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::context;
use crate::review::{self, BadReview};

/// What the stand-in answers one POST with.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    /// One line for the stand-in's log.
    pub log: String,
}

pub struct Policy {
    evaluator: Evaluator,
    mode: Mode,
    path: String,
    client: Client,
}

impl Policy {
    /// Compiles `wasm` and checks it against `admission_policy` as the policy-server does
    /// before it serves; the host calls will be answered through `client`.
    pub fn load(
        wasm: Vec<u8>,
        admission_policy: &ClusterAdmissionPolicy,
        client: Client,
    ) -> Result<Self> {
        ensure!(
            admission_policy.spec["message"].is_null(),
            "ClusterAdmissionPolicy {}: spec.message (a custom rejection message) is not implemented by the stand-in",
            admission_policy.name
        );
        let timeout = admission_policy
            .timeout_eval_seconds()
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let evaluator =
            Evaluator::start(wasm, timeout, admission_policy.settings()).with_context(|| {
                format!(
                    "loading the policy of ClusterAdmissionPolicy {}",
                    admission_policy.name
                )
            })?;
        Ok(Self {
            evaluator,
            mode: admission_policy.mode()?,
            path: admission_policy.validate_path(),
            client,
        })
    }

    /// The admission path it is served at (`/validate/<unique name>`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The answer to an AdmissionReview body.
    pub async fn answer(&self, body: &[u8]) -> Answer {
        let started = Instant::now();
        let request = match review::parse_review(body) {
            Ok(request) => request,
            Err(error) => return bad_review(&error),
        };
        let cluster = context::snapshot(&self.client, &request).await;
        let evaluation = self.evaluator.validate(request.payload(), cluster).await;
        let (response, verdict) = match &evaluation {
            Ok(evaluation) => (
                review::verdict_response(&request.uid, &evaluation.response),
                describe_verdict(&evaluation.response),
            ),
            Err(message) => (
                review::failure_response(&request.uid, message),
                format!("FAILED {message}"),
            ),
        };
        let response = match self.mode {
            Mode::Protect => response,
            Mode::Monitor => review::monitor_response(&request.uid),
        };
        let host_calls = evaluation
            .as_ref()
            .map_or_else(|_| String::new(), describe_host_calls);
        Answer {
            status: 200,
            body: review::review(response),
            log: format!(
                "review {} {} by {}: {verdict}{host_calls} ({} ms)",
                request.uid,
                request.describe(),
                request.username(),
                started.elapsed().as_millis()
            ),
        }
    }
}

/// An evaluation asked of the evaluator thread.
struct Job {
    payload: Value,
    cluster: Cluster,
    reply: oneshot::Sender<Result<Evaluation<ValidationResponse>, String>>,
}

/// The waPC host lives on a thread of its own (it is not `Send`): jobs in, verdicts out, one
/// at a time.
struct Evaluator {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Evaluator {
    /// Starts the thread, which loads the module and checks it (protocol `v1`, `settings`
    /// accepted) before taking jobs; a failure there is returned here.
    fn start(wasm: Vec<u8>, timeout: Duration, settings: Value) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (loaded, outcome) = mpsc::channel::<Result<(), String>>();
        std::thread::Builder::new()
            .name("policy".into())
            .spawn(move || {
                let mut host = match load_checked(&wasm, timeout, &settings) {
                    Ok(host) => {
                        let _ = loaded.send(Ok(()));
                        host
                    }
                    Err(error) => {
                        let _ = loaded.send(Err(format!("{error:#}")));
                        return;
                    }
                };
                for job in queue {
                    let result = host
                        .validate_in(&settings, &job.payload, &job.cluster)
                        .map_err(|error| error_chain(&error));
                    // The reviewer may have gone (the API server's timeout): nothing to do.
                    let _ = job.reply.send(result);
                }
            })
            .context("starting the policy thread")?;
        match outcome.recv() {
            Ok(Ok(())) => Ok(Self {
                jobs: Mutex::new(jobs),
            }),
            Ok(Err(message)) => bail!(message),
            Err(_) => bail!("the policy thread ended while loading the module"),
        }
    }

    async fn validate(
        &self,
        payload: Value,
        cluster: Cluster,
    ) -> Result<Evaluation<ValidationResponse>, String> {
        let (reply, verdict) = oneshot::channel();
        let job = Job {
            payload,
            cluster,
            reply,
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(job);
        if sent.is_err() {
            return Err("the policy thread has ended".to_owned());
        }
        verdict
            .await
            .unwrap_or_else(|_| Err("the policy thread dropped the evaluation".to_owned()))
    }
}

fn load_checked(wasm: &[u8], timeout: Duration, settings: &Value) -> Result<PolicyHost> {
    let mut host = PolicyHost::with_timeout(wasm, timeout).context("compiling the module")?;
    let protocol = host
        .protocol_version()
        .context("asking the policy's protocol version")?;
    ensure!(
        protocol == "v1",
        "the policy speaks protocol {protocol:?}, not v1"
    );
    let verdict = host
        .validate_settings(settings)
        .context("validating the settings")?
        .response;
    ensure!(
        verdict.valid,
        "the policy refuses its settings: {}",
        verdict.message.unwrap_or_default()
    );
    Ok(host)
}

/// An error and its sources, `: `-separated (the runner's errors are not `Sync`).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn describe_host_calls(evaluation: &Evaluation<ValidationResponse>) -> String {
    let calls: Vec<String> = evaluation
        .capability_calls()
        .map(ToString::to_string)
        .collect();
    let unexpected = evaluation.unexpected_calls().count();
    let flag = if unexpected > 0 {
        format!(" UNEXPECTED host calls: {unexpected}")
    } else {
        String::new()
    };
    format!("; host calls [{}]{flag}", calls.join(", "))
}

fn describe_verdict(verdict: &ValidationResponse) -> String {
    let mut text = if verdict.accepted {
        "allowed".to_owned()
    } else {
        format!(
            "denied ({}) {}",
            verdict
                .code
                .map_or_else(|| "no code".to_owned(), |code| code.to_string()),
            verdict.message.as_deref().unwrap_or("")
        )
    };
    for warning in verdict.warnings.iter().flatten() {
        text.push_str(&format!("; warning: {warning}"));
    }
    text
}

fn bad_review(error: &BadReview) -> Answer {
    Answer {
        status: BadReview::STATUS,
        body: error.body(),
        log: format!("refused a body: {error}"),
    }
}
