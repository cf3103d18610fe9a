//! The soak's command line.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use namespace_baseline_cluster_tests::flags::Flags;

pub struct Options {
    pub namespaces: usize,
    pub duration: Duration,
    /// Leader stops: SIGKILL (a crash) or SIGTERM (a graceful shutdown), as `graceful` says.
    pub kills: usize,
    /// The share of the leader stops made with SIGTERM, spread evenly among the SIGKILLs.
    pub graceful: f64,
    pub apiserver_restarts: usize,
    pub etcd_restarts: usize,
    pub proxy_restarts: usize,
    pub replicas: usize,
    pub faults: f64,
    pub seed: u64,
    pub out: Option<PathBuf>,
}

const USAGE: &str = "soak [--namespaces 300] [--duration 180] [--kills 8] [--graceful 0.5] [--apiserver-restarts 1] [--etcd-restarts 1] [--proxy-restarts 1] [--replicas 3] [--faults 0.3] [--seed 1] [--out FILE]";

impl Options {
    pub fn parse() -> Result<Self> {
        let mut options = Self {
            namespaces: 300,
            duration: Duration::from_secs(180),
            kills: 8,
            graceful: 0.5,
            apiserver_restarts: 1,
            etcd_restarts: 1,
            proxy_restarts: 1,
            replicas: 3,
            faults: 0.3,
            seed: 1,
            out: None,
        };
        let mut flags = Flags::new(std::env::args().skip(1), USAGE);
        while let Some(flag) = flags.next_flag() {
            let mut value = || flags.value(&flag);
            match flag.name.as_str() {
                "--namespaces" => options.namespaces = value()?.parse()?,
                "--duration" => options.duration = Duration::from_secs(value()?.parse()?),
                "--kills" => options.kills = value()?.parse()?,
                "--graceful" => options.graceful = value()?.parse()?,
                "--apiserver-restarts" => options.apiserver_restarts = value()?.parse()?,
                "--etcd-restarts" => options.etcd_restarts = value()?.parse()?,
                "--proxy-restarts" => options.proxy_restarts = value()?.parse()?,
                "--replicas" => options.replicas = value()?.parse()?,
                "--faults" => options.faults = value()?.parse()?,
                "--seed" => options.seed = value()?.parse()?,
                "--out" => options.out = Some(value()?.into()),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if options.namespaces == 0 || options.replicas < 2 || options.duration.is_zero() {
            bail!("--namespaces and --duration must be positive and --replicas at least 2");
        }
        if !(0.0..1.0).contains(&options.faults) {
            bail!("--faults is a probability below 1");
        }
        if !(0.0..=1.0).contains(&options.graceful) {
            bail!("--graceful is a share between 0 and 1");
        }
        Ok(options)
    }

    /// Whether the leader stop number `index` (from 0) is a SIGTERM: the SIGTERMs are spread
    /// evenly among the SIGKILLs (0.5: every second stop, the first a SIGKILL).
    pub fn graceful_stop(&self, index: usize) -> bool {
        let before = (index as f64 * self.graceful).floor();
        let after = ((index + 1) as f64 * self.graceful).floor();
        after > before
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} namespaces, {} replicas, {:?} of chaos at {:.0} % faults, {} leader stops ({:.0} % by SIGTERM, the others SIGKILL), {} API server / {} etcd / {} proxy restarts, seed {}",
            self.namespaces,
            self.replicas,
            self.duration,
            self.faults * 100.0,
            self.kills,
            self.graceful * 100.0,
            self.apiserver_restarts,
            self.etcd_restarts,
            self.proxy_restarts,
            self.seed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_graceful(graceful: f64) -> Options {
        Options {
            namespaces: 1,
            duration: Duration::from_secs(1),
            kills: 8,
            graceful,
            apiserver_restarts: 0,
            etcd_restarts: 0,
            proxy_restarts: 0,
            replicas: 2,
            faults: 0.0,
            seed: 1,
            out: None,
        }
    }

    /// `T` for a SIGTERM, `K` for a SIGKILL, for the 8 stops.
    fn signals(graceful: f64) -> String {
        let options = with_graceful(graceful);
        (0..options.kills)
            .map(|i| if options.graceful_stop(i) { 'T' } else { 'K' })
            .collect()
    }

    #[test]
    fn sigterms_are_spread_evenly_among_the_sigkills() {
        assert_eq!(signals(0.5), "KTKTKTKT");
        assert_eq!(signals(0.25), "KKKTKKKT");
        assert_eq!(signals(0.0), "KKKKKKKK");
        assert_eq!(signals(1.0), "TTTTTTTT");
    }
}
