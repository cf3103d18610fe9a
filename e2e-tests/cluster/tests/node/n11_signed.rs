//! n11: the policy signed after its push and verified by the policy-server that pulls it
//! (issue 51). Why: a platform team that verifies what its admission controller runs needs to
//! know that a PolicyServer with a `verificationConfig` serves the module signed with its key
//! and refuses the others, what it shows when it refuses, and what it does where no public
//! Sigstore instance can be reached (this network, an air-gapped cluster).
//!
//! On the node's registry (the module `make push-policy` pushed, kubewarden.sh):
//! - three modules: the pushed one signed with a key after the push (cosign, the legacy `.sig`
//!   signature Kubewarden verifies, no transparency log: this network has none), the same
//!   module pushed under another repository and never signed, and under a third repository
//!   signed with another key;
//! - an offline Sigstore trust config (`cosign trusted-root create`, a certificate authority
//!   of the team's own) and `kwctl verify` with it and the key: the first verified, the other
//!   two refused (its messages);
//! - a PolicyServer `verified` whose `verificationConfig` names the key (a ConfigMap, as
//!   Kubewarden's docs give it) and, for each module in turn, a ClusterAdmissionPolicy on it
//!   (our policy's settings, a Pod rule whose namespaceSelector matches no namespace: it
//!   judges nothing here); what its policy-server logged decides: without the trust config the
//!   unsigned module is served unverified (policy-server 1.35 verifies nothing when it cannot
//!   build a Sigstore trust root: asserted, so that a release that changes it is noticed);
//!   with it, the signed module verified and `active`, the others refused and never `active`.
//!   Each case prints what a user sees (the policy's status, the pods, the log's verdict).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams};
use namespace_baseline_cluster_tests::admission::ChainOptions;
use namespace_baseline_cluster_tests::kubewarden_stack::{
    ENV_REGISTRY, ENV_REGISTRY_CA, cluster_admission_policies, policy_servers, pushed_module,
};
use namespace_baseline_cluster_tests::{Cluster, repo_root, wait_until};
use namespace_baseline_testkit::kubewarden::{CONTROLLER_NAMESPACE, DEFAULT_POLICY_SERVER};
use serde_json::{Value, json};

use crate::common::{self, figure};

const POLICY_SERVER: &str = "verified";
const VERIFICATION_CONFIG: &str = "namespace-baseline-verification";
const TRUST_CONFIG: &str = "namespace-baseline-sigstore-trust";

/// A program the test runs, and what it printed.
fn run(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", program.display()));
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
        .trim()
        .to_owned(),
    )
}

/// `text` without ANSI colour sequences (`ESC [ … m`), which kwctl's log writes.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

fn program(env: &str, what: &str) -> PathBuf {
    PathBuf::from(
        std::env::var(env).unwrap_or_else(|_| {
            panic!("{env} is not set: {what} (e2e-tests/node-tests.sh sets it)")
        }),
    )
}

/// The signing and pushing tools, and where they talk to.
struct Tools {
    cosign: PathBuf,
    kwctl: PathBuf,
    registry: String,
    ca: String,
    /// kwctl's sources file naming the registry's CA (kubewarden.sh wrote it).
    sources: String,
    /// The Sigstore trust config of an offline cluster (see [`Tools::offline_trust_config`]).
    trust_config: PathBuf,
    work: PathBuf,
}

impl Tools {
    fn from_env() -> Self {
        let work = std::env::temp_dir().join(format!("nsb-n11-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("a work directory");
        Self {
            cosign: program(
                "NSB_COSIGN_BIN",
                "cosign (e2e-tests/kubewarden/build-cosign.sh)",
            ),
            kwctl: program("KWCTL", "kwctl 1.35 (e2e-tests/kubewarden/install.sh)"),
            registry: std::env::var(ENV_REGISTRY).expect("NSB_NODE_REGISTRY"),
            ca: std::env::var(ENV_REGISTRY_CA).expect("NSB_NODE_REGISTRY_CA"),
            sources: std::env::var("NSB_KWCTL_SOURCES").expect("NSB_KWCTL_SOURCES"),
            trust_config: work.join("sigstore-trust-config.json"),
            work,
        }
    }

    /// A Sigstore trust config for kwctl where no public Sigstore instance is reachable:
    /// without one, kwctl 1.35 fetches Sigstore's TUF root from the internet first and fails
    /// (`Failed to fetch https://tuf-repo-cdn.sigstore.dev/…`), and with an empty one it refuses
    /// every signature (`Fulcio certificates not found`). Its only certificate authority
    /// is one of the platform team's own (here a throwaway one), which issues no signing
    /// certificates: signatures made with a key verify, keyless ones cannot. Written with
    /// `cosign trusted-root create`, wrapped as a ClientTrustConfig.
    fn offline_trust_config(&self) -> String {
        let ca = self.work.join("offline-ca.crt");
        let key = self.work.join("offline-ca.key");
        let (ok, text) = run(
            Path::new("openssl"),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=offline signing CA",
                "-keyout",
                &key.to_string_lossy(),
                "-out",
                &ca.to_string_lossy(),
            ],
            &[],
        );
        assert!(ok, "openssl: {text}");
        let root = self.work.join("trusted-root.json");
        let fulcio = format!(
            "url=https://fulcio.invalid,certificate-chain={}",
            ca.display()
        );
        let args = [
            "trusted-root",
            "create",
            "--no-default-ctfe",
            "--no-default-fulcio",
            "--no-default-rekor",
            "--no-default-tsa",
            "--fulcio",
            &fulcio,
            "--out",
            &root.to_string_lossy(),
        ]
        .map(str::to_owned);
        let (ok, text) = run(
            &self.cosign,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            &[],
        );
        assert!(ok, "cosign trusted-root create: {text}");
        let trusted_root: Value =
            serde_json::from_str(&std::fs::read_to_string(&root).expect("the trusted root"))
                .expect("cosign wrote JSON");
        let config = json!({
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": trusted_root,
            "signingConfig": {"mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json"},
        })
        .to_string();
        std::fs::write(&self.trust_config, &config).expect("writing the trust config");
        format!("cosign {}", args.join(" "))
    }

    /// A key pair (no password), its private key's path.
    fn key_pair(&self, name: &str) -> PathBuf {
        let prefix = self.work.join(name);
        let (ok, text) = run(
            &self.cosign,
            &[
                "generate-key-pair",
                "--output-key-prefix",
                &prefix.to_string_lossy(),
            ],
            &[("COSIGN_PASSWORD", "")],
        );
        assert!(ok, "cosign generate-key-pair: {text}");
        prefix.with_extension("key")
    }

    /// Signs `reference` (`registry://…@sha256:…`) with `key`, as Kubewarden's release signs
    /// its policies but with a key and no transparency log.
    fn sign(&self, reference: &str, key: &Path) -> String {
        let args = [
            "sign",
            "--yes",
            "--key",
            &key.to_string_lossy(),
            "--tlog-upload=false",
            "--new-bundle-format=false",
            "--use-signing-config=false",
            reference.trim_start_matches("registry://"),
        ]
        .map(str::to_owned);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, text) = run(
            &self.cosign,
            &args,
            &[("COSIGN_PASSWORD", ""), ("SSL_CERT_FILE", &self.ca)],
        );
        assert!(ok, "cosign {}: {text}", args.join(" "));
        format!("cosign {}", args.join(" "))
    }

    /// Pushes the annotated module to `repository` of the node's registry with kwctl; its
    /// reference by digest.
    fn push(&self, repository: &str) -> String {
        let target = format!("registry://{}/{repository}:v0.1.0", self.registry);
        let module = repo_root().join("annotated-policy.wasm");
        let (ok, text) = run(
            &self.kwctl,
            &[
                "push",
                "--sources-path",
                &self.sources,
                "-o",
                "json",
                &module.to_string_lossy(),
                &target,
            ],
            &[],
        );
        assert!(ok, "kwctl push {target}: {text}");
        let printed: Value = serde_json::from_str(text.lines().last().unwrap_or_default())
            .unwrap_or_else(|error| panic!("kwctl push printed no JSON ({error}): {text}"));
        let reference = printed["immutable_ref"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(reference.contains("@sha256:"), "kwctl push: {text}");
        reference
    }

    /// `kwctl verify` of `reference` with the public key of `key`: verified, and its output.
    fn verify(&self, reference: &str, key: &Path) -> (bool, String) {
        let public = key.with_extension("pub");
        let (verified, text) = run(
            &self.kwctl,
            &[
                "verify",
                "--sources-path",
                &self.sources,
                "--sigstore-trust-config",
                &self.trust_config.to_string_lossy(),
                "--verification-key",
                &public.to_string_lossy(),
                reference,
            ],
            &[("NO_COLOR", "1")],
        );
        // Its message, without the backtrace an error ends with, nor the terminal's colours.
        let message: Vec<&str> = text
            .lines()
            .take_while(|line| !line.starts_with("Stack backtrace:"))
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect();
        (verified, without_colours(&message.join(" ")))
    }
}

#[tokio::test]
async fn n11_a_verifying_policy_server_serves_the_signed_module_and_refuses_the_others() {
    let (cluster, _names, _) = common::start("n11").await;
    let tools = Tools::from_env();
    let trusted = tools.key_pair("trusted");
    let other = tools.key_pair("other");
    let signed = pushed_module().unwrap_or_else(|error| panic!("{error:#}"));
    let how = tools.sign(&signed, &trusted);
    figure("n11", format!("signed after the push: {how}"));
    let how = tools.offline_trust_config();
    figure("n11", format!("the offline Sigstore trust config: {how}"));
    let unsigned = tools.push("hedronite/unsigned/namespace-baseline");
    let other_signed = tools.push("hedronite/other-key/namespace-baseline");
    tools.sign(&other_signed, &other);
    let cases = [
        ("signed", signed.as_str(), true),
        ("unsigned", unsigned.as_str(), false),
        ("other-key", other_signed.as_str(), false),
    ];
    for (case, reference, expected) in cases {
        let (verified, text) = tools.verify(reference, &trusted);
        figure(
            "n11",
            format!(
                "kwctl verify --sigstore-trust-config … --verification-key trusted.pub {case}: {} ({text})",
                if verified { "verified" } else { "refused" },
            ),
        );
        assert_eq!(
            verified, expected,
            "kwctl verify of the {case} module: {text}"
        );
    }

    let trust_config = std::fs::read_to_string(&tools.trust_config).expect("the trust config");
    let outcome = std::panic::AssertUnwindSafe(async {
        // A verificationConfig alone, as Kubewarden's docs give it: where no public Sigstore
        // instance is reachable, policy-server 1.35 cannot build its trust root, warns
        // ("Cannot create Sigstore trust root, verification relying on Rekor and Fulcio will
        // fail") and then verifies nothing at all: the unsigned module is served. Should a
        // release fix this, this check fails and the docs' warning is to be revised.
        install_verifying_policy_server(&cluster, &trusted, None).await;
        check_served(
            &cluster,
            "unsigned-without-trust-config",
            &unsigned,
            Verdict::ServedUnverified,
        )
        .await;
        // With the offline trust config, the key is checked.
        install_verifying_policy_server(&cluster, &trusted, Some(&trust_config)).await;
        for (case, reference, verified) in cases {
            let expected = if verified {
                Verdict::Verified
            } else {
                Verdict::Refused
            };
            check_served(&cluster, case, reference, expected).await;
        }
    });
    let outcome = futures::FutureExt::catch_unwind(outcome).await;
    for case in [
        "signed-without-trust-config",
        "signed",
        "unsigned",
        "other-key",
    ] {
        let _ = cluster_admission_policies(&cluster.admin)
            .delete(&policy_name(case), &DeleteParams::default())
            .await;
    }
    let _ = policy_servers(&cluster.admin)
        .delete(POLICY_SERVER, &DeleteParams::default())
        .await;
    let _ = std::fs::remove_dir_all(&tools.work);
    outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}

fn policy_name(case: &str) -> String {
    format!("n11-{case}")
}

/// The ConfigMap of the key, and a PolicyServer that verifies with it (the default one's
/// image, ServiceAccount and registry CA).
async fn install_verifying_policy_server(
    cluster: &Cluster,
    trusted: &Path,
    trust_config: Option<&str>,
) {
    cluster
        .install_policy_server_access()
        .await
        .expect("deploy/policy-server-rbac.yaml's grants");
    let public = std::fs::read_to_string(trusted.with_extension("pub")).expect("the public key");
    let verification = format!(
        "apiVersion: v1\nallOf:\n  - kind: pubKey\n    owner: platform-team\n    key: |\n{}",
        public
            .lines()
            .map(|line| format!("      {line}\n"))
            .collect::<String>()
    );
    cluster
        .apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": VERIFICATION_CONFIG, "namespace": CONTROLLER_NAMESPACE},
            "data": {"verification-config": verification},
        }))
        .await
        .expect("the verification ConfigMap");
    if let Some(config) = trust_config {
        cluster
            .apply(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": TRUST_CONFIG, "namespace": CONTROLLER_NAMESPACE},
                "data": {"sigstore-trust-config": config},
            }))
            .await
            .expect("the Sigstore trust config's ConfigMap");
    }
    let default = policy_servers(&cluster.admin)
        .get(DEFAULT_POLICY_SERVER)
        .await
        .expect("the default PolicyServer");
    let spec = &default.data["spec"];
    let mut policy_server = json!({
        "apiVersion": "policies.kubewarden.io/v1", "kind": "PolicyServer",
        "metadata": {"name": POLICY_SERVER},
        "spec": {
            "image": spec["image"],
            "replicas": 1,
            "serviceAccountName": spec["serviceAccountName"],
            "sourceAuthorities": spec["sourceAuthorities"],
            "env": spec["env"],
            "verificationConfig": VERIFICATION_CONFIG,
        },
    });
    if trust_config.is_some() {
        policy_server["spec"]["sigstoreTrustConfig"] = json!(TRUST_CONFIG);
    }
    cluster
        .apply(&policy_server)
        .await
        .expect("the verifying PolicyServer");
}

/// What the verifying policy-server did with a module, by its own log (info level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// `"status":"verified-signatures"`: checked against the verification config, served.
    Verified,
    /// `"policy cannot be verified"`: not served.
    Refused,
    /// Downloaded and served with no verification logged at all.
    ServedUnverified,
}

/// The verdict the verifying policy-server's pods logged for the policy `unique` (its unique
/// name), if any yet.
async fn verdict(cluster: &Cluster, unique: &str) -> anyhow::Result<Option<Verdict>> {
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), CONTROLLER_NAMESPACE);
    let listed = pods
        .list(&ListParams::default().labels(&format!("kubewarden/policy-server={POLICY_SERVER}")))
        .await?
        .items;
    let ours = |line: &&str| {
        line.contains(&format!("\"name\":\"{unique}\""))
            || line.contains(&format!("\"policy\":\"{unique}\""))
    };
    for pod in listed {
        let name = pod.metadata.name.unwrap_or_default();
        let Ok(log) = pods.logs(&name, &LogParams::default()).await else {
            continue;
        };
        let lines: Vec<&str> = log.lines().filter(ours).collect();
        if lines
            .iter()
            .any(|line| line.contains("policy cannot be verified"))
        {
            return Ok(Some(Verdict::Refused));
        }
        if lines
            .iter()
            .any(|line| line.contains("verified-signatures"))
        {
            return Ok(Some(Verdict::Verified));
        }
        if lines
            .iter()
            .any(|line| line.contains("\"message\":\"policy download\""))
        {
            return Ok(Some(Verdict::ServedUnverified));
        }
    }
    Ok(None)
}

/// A ClusterAdmissionPolicy of `reference` on the verifying PolicyServer, until its
/// policy-server logged what it did with the module (`expected`) and, for a module it serves,
/// the policy is `active`; what a user sees, printed.
async fn check_served(cluster: &Cluster, case: &str, reference: &str, expected: Verdict) {
    let name = policy_name(case);
    let unique = format!("clusterwide-{name}");
    let shipped =
        Cluster::shipped_as_applied(&ChainOptions::default()).expect("the shipped policies");
    let applied = Instant::now();
    cluster
        .apply(&json!({
            "apiVersion": "policies.kubewarden.io/v1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "module": reference,
                "policyServer": POLICY_SERVER,
                "mode": "protect",
                "mutating": false,
                "backgroundAudit": false,
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
                "namespaceSelector": {"matchLabels": {"hedronite.io/n11-matches-no-namespace": "true"}},
                "contextAwareResources": shipped[0].spec["contextAwareResources"],
                "settings": shipped[0].spec["settings"],
            },
        }))
        .await
        .unwrap_or_else(|error| panic!("applying {name}: {error:#}"));
    let api = cluster_admission_policies(&cluster.admin);
    let status = || async {
        api.get(&name)
            .await
            .map(|policy| policy.data["status"].clone())
            .unwrap_or(Value::Null)
    };
    let logged = wait_until(
        &format!("the verifying policy-server's verdict on {case}"),
        Duration::from_secs(180),
        || verdict(cluster, &unique),
    )
    .await;
    let seen = what_a_user_sees(cluster, &name, status().await).await;
    let (verdict, took) = logged.unwrap_or_else(|error| panic!("{case}: {error:#}\n{seen}"));
    assert_eq!(verdict, expected, "the {case} module:\n{seen}");
    if verdict != Verdict::Refused {
        wait_until(
            &format!("{name} active"),
            Duration::from_secs(180),
            || async { Ok((status().await["policyStatus"] == "active").then_some(())) },
        )
        .await
        .unwrap_or_else(|error| panic!("{error:#}\n{seen}"));
    }
    let seen = what_a_user_sees(cluster, &name, status().await).await;
    for line in seen.lines() {
        figure(
            "n11",
            format!(
                "{case} module ({verdict:?}, logged {:.1} s after the apply; seen at {:.1} s): {line}",
                took.as_secs_f64(),
                applied.elapsed().as_secs_f64()
            ),
        );
    }
    api.delete(&name, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting {name}: {error}"));
    wait_until(
        &format!("{name} gone"),
        Duration::from_secs(120),
        || async { Ok(api.get_opt(&name).await?.is_none().then_some(())) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}"));
}

/// The policy's status, the verifying PolicyServer's pods (their state) and their log lines
/// that name a verification or an error.
async fn what_a_user_sees(cluster: &Cluster, name: &str, status: Value) -> String {
    let conditions: Vec<String> = status["conditions"]
        .as_array()
        .map(|conditions| {
            conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={} {}: {}",
                        c["type"], c["status"], c["reason"], c["message"]
                    )
                    .replace('"', "")
                })
                .collect()
        })
        .unwrap_or_default();
    let mut seen = format!(
        "ClusterAdmissionPolicy {name}: policyStatus {}; conditions: {}",
        status["policyStatus"],
        conditions.join("; ")
    );
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), CONTROLLER_NAMESPACE);
    let listed = pods
        .list(&ListParams::default().labels(&format!("kubewarden/policy-server={POLICY_SERVER}")))
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    for pod in listed {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let states: Vec<String> = pod
            .status
            .as_ref()
            .and_then(|status| status.container_statuses.clone())
            .unwrap_or_default()
            .iter()
            .map(|container| {
                let state = serde_json::to_value(&container.state).unwrap_or(Value::Null);
                format!(
                    "ready {} restarts {} state {}",
                    container.ready, container.restart_count, state
                )
            })
            .collect();
        seen.push_str(&format!("\npod {pod_name}: {}", states.join(", ")));
        for previous in [false, true] {
            let params = LogParams {
                previous,
                ..LogParams::default()
            };
            if let Ok(log) = pods.logs(&pod_name, &params).await {
                for line in log
                    .lines()
                    .filter(|line| {
                        line.contains("\"level\":\"ERROR\"")
                            || line.starts_with("Error:")
                            || line.contains("verified-signatures")
                            || line.contains("Cannot create Sigstore trust root")
                    })
                    .take(3)
                {
                    seen.push_str(&format!(
                        "\n  {}log: {line}",
                        if previous { "previous " } else { "" }
                    ));
                }
            }
        }
    }
    seen
}
