//! The probe's flags on `run`: off unless `--probe-image` names the image to probe with.

use std::time::Duration;

/// The enforcement probe (docs/reference.md, "Enforced").
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ProbeOptions {
    /// Prove each Enforce baseline's wall on packets with probe pods of this image (the
    /// reconciler's own: the chart sets it); empty: no probe (`Enforced` is Unknown/ProbeOff).
    #[arg(long, global = true, default_value = "")]
    pub probe_image: String,

    /// Pull policy of the probe pods.
    #[arg(long, global = true, default_value = "IfNotPresent")]
    pub probe_image_pull_policy: String,

    /// How often each baseline's wall is probed (also after its spec changes and after a
    /// repair of its wall).
    #[arg(long, global = true, default_value = "5m", value_parser = parse_period)]
    pub probe_interval: Duration,

    /// The unwalled namespace of the positive controls (the chart creates it, with a Role
    /// for the reconciler's probe pods there).
    #[arg(long, global = true, default_value = "namespace-baseline-probe")]
    pub probe_control_namespace: String,

    /// How long the probe listeners listen; the probe pods must start within it.
    #[arg(long, global = true, default_value = "20s", value_parser = parse_period)]
    pub probe_listen_window: Duration,

    /// The name the canary resolves through its own resolver (a Service every cluster has).
    #[arg(long, global = true, default_value = "kubernetes.default.svc")]
    pub probe_dns_name: String,
}

impl ProbeOptions {
    pub fn enabled(&self) -> bool {
        !self.probe_image.is_empty()
    }
}

fn parse_period(text: &str) -> Result<Duration, String> {
    let duration = match text.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(text).map_err(|error| error.to_string())?,
    };
    if duration < Duration::from_secs(1) {
        return Err("must be at least 1s".to_owned());
    }
    Ok(duration)
}
