//! The soak's command line.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use namespace_baseline_cluster_tests::flags::Flags;

pub struct Options {
    pub namespaces: usize,
    pub duration: Duration,
    pub kills: usize,
    pub apiserver_restarts: usize,
    pub etcd_restarts: usize,
    pub proxy_restarts: usize,
    pub replicas: usize,
    pub faults: f64,
    pub seed: u64,
    pub out: Option<PathBuf>,
}

const USAGE: &str = "soak [--namespaces 300] [--duration 180] [--kills 8] [--apiserver-restarts 1] [--etcd-restarts 1] [--proxy-restarts 1] [--replicas 3] [--faults 0.3] [--seed 1] [--out FILE]";

impl Options {
    pub fn parse() -> Result<Self> {
        let mut options = Self {
            namespaces: 300,
            duration: Duration::from_secs(180),
            kills: 8,
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
        Ok(options)
    }
}

impl fmt::Display for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} namespaces, {} replicas, {:?} of chaos at {:.0} % faults, {} leader kills, {} API server / {} etcd / {} proxy restarts, seed {}",
            self.namespaces,
            self.replicas,
            self.duration,
            self.faults * 100.0,
            self.kills,
            self.apiserver_restarts,
            self.etcd_restarts,
            self.proxy_restarts,
            self.seed
        )
    }
}
