//! The probe pods: the reconciler's own image running `probe`, as restricted as the
//! reconciler (non-root, read-only root filesystem, no capability, no ServiceAccount token,
//! no host network), in the canary namespace or the control namespace only.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::agent::ProbeArgs;

/// The label every probe pod carries; its value is the baseline probed.
pub const PROBE_FOR_LABEL: &str = "hedronite.io/probe-for";
/// The label that makes a namespace a baseline's canary; its value is the baseline's name.
pub const CANARY_FOR_LABEL: &str = "hedronite.io/canary-for";
/// The TCP port the probe listeners listen on.
pub const PORT: u16 = 9797;

/// What one probe pod is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// In the control namespace: listens (the positive control's target, the canary's
    /// egress target).
    ControlListener,
    /// In the canary namespace: listens (the ingress target), connects out, resolves.
    Canary,
    /// In the control namespace: connects to the canary and to the control listener,
    /// resolves (the controls).
    ControlClient,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ControlListener => "listener",
            Self::Canary => "canary",
            Self::ControlClient => "client",
        }
    }
}

/// The image and how to pull it.
#[derive(Debug, Clone)]
pub struct Image {
    pub reference: String,
    pub pull_policy: String,
}

/// The `probe` command line of `args`, as the container's args.
pub fn command_line(args: &ProbeArgs) -> Vec<String> {
    let mut line = vec!["probe".to_owned()];
    if let Some(port) = args.listen_port {
        line.push(format!("--listen-port={port}"));
        line.push(format!(
            "--listen-for={}",
            humantime::format_duration(args.listen_for)
        ));
    }
    if !args.connect_after.is_zero() {
        line.push(format!(
            "--connect-after={}",
            humantime::format_duration(args.connect_after)
        ));
    }
    for target in &args.connect {
        line.push(format!("--connect={target}"));
    }
    if let Some(name) = &args.resolve {
        line.push(format!("--resolve={name}"));
    }
    line.push(format!(
        "--timeout={}",
        humantime::format_duration(args.timeout)
    ));
    line
}

/// A probe pod of `baseline` running `args`; it ends on its own and is never restarted.
pub fn pod(baseline: &str, role: Role, image: &Image, args: &ProbeArgs) -> Pod {
    let deadline = (args.listen_for + Duration::from_secs(60)).as_secs();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("nsb-probe-{}-", role.as_str()),
            "labels": {
                "app.kubernetes.io/name": "namespace-baseline-probe",
                "app.kubernetes.io/component": role.as_str(),
                "app.kubernetes.io/managed-by": "namespace-baseline",
                PROBE_FOR_LABEL: baseline,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "probe",
                "image": image.reference,
                "imagePullPolicy": image.pull_policy,
                "args": command_line(args),
                "ports": args.listen_port.map(|port| vec![json!({"containerPort": port, "protocol": "TCP"})]).unwrap_or_default(),
                "terminationMessagePolicy": "File",
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"memory": "32Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "runAsNonRoot": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    }))
    .expect("a probe pod is a valid Pod")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cli::{Cli, Command};
    use clap::Parser;

    /// The container's args parse back to the same probe, with the binary's own command line
    /// (its global flags included).
    #[test]
    fn the_pods_command_line_is_the_probe_asked_for() {
        let args = ProbeArgs {
            listen_port: Some(PORT),
            listen_for: Duration::from_secs(20),
            connect_after: Duration::from_secs(5),
            connect: vec!["10.1.0.2:9797".to_owned()],
            resolve: Some("kubernetes.default.svc".to_owned()),
            timeout: Duration::from_secs(3),
            report: "/dev/termination-log".into(),
        };
        let line = command_line(&args);
        let cli =
            Cli::try_parse_from(std::iter::once("reconciler".to_owned()).chain(line)).unwrap();
        assert_eq!(cli.command, Some(Command::Probe(args)));
    }

    #[test]
    fn a_probe_pod_is_restricted_and_tokenless() {
        let image = Image {
            reference: "example/reconciler:1".to_owned(),
            pull_policy: "IfNotPresent".to_owned(),
        };
        let args = ProbeArgs {
            listen_port: None,
            listen_for: Duration::from_secs(20),
            connect_after: Duration::ZERO,
            connect: Vec::new(),
            resolve: None,
            timeout: Duration::from_secs(3),
            report: "/dev/termination-log".into(),
        };
        let pod = serde_json::to_value(pod("team-a", Role::ControlClient, &image, &args)).unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["restartPolicy"], "Never");
        assert!(spec.get("hostNetwork").is_none());
        let container = &spec["containers"][0];
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            container["securityContext"]["capabilities"]["drop"][0],
            "ALL"
        );
        assert_eq!(container["image"], "example/reconciler:1");
        assert_eq!(pod["metadata"]["labels"][PROBE_FOR_LABEL], "team-a");
    }
}
