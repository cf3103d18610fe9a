//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgAction, ArgGroup, ArgMatches, FromArgMatches, Parser, Subcommand, ValueEnum};

use namespace_baseline_leader::Timing;

/// Installs and repairs the network walls declared by NamespaceBaselines.
#[derive(Debug, Parser)]
#[command(name = "namespace-baseline-reconciler", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunOptions,
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Run the reconciler (the default).
    Run,
    /// Print the CustomResourceDefinition YAML.
    Crd,
    /// Print what the reconciler would write, without writing: from manifests (offline) or
    /// from the cluster (read-only). Exit code 0: nothing to change; 2: changes pending;
    /// 1: error.
    Plan(PlanOptions),
    /// Check that this binary, as built, contains a panicking reconcile (exit code 0), as
    /// the image tests do.
    SelfCheck,
    /// Print the reconciler's egress door to the API server for the cluster of the
    /// kubeconfig: the addresses and ports of the EndpointSlices of `default/kubernetes`, as
    /// the chart's values (`-o values`, the default) or as the NetworkPolicy (`-o manifest`).
    ApiDoor(ApiDoorOptions),
    /// Inside a probe pod of the enforcement probe (started by the reconciler): listen,
    /// connect, resolve, and write what was seen to the termination message.
    Probe(crate::reconcile::probe::agent::ProbeArgs),
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ApiDoorOptions {
    #[arg(long, short = 'o', value_enum, default_value_t = ApiDoorFormat::Values)]
    pub output: ApiDoorFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiDoorFormat {
    /// `reconciler.networkPolicy.apiServer` for `helm install -f`.
    Values,
    /// The reconciler's NetworkPolicy of `deploy/reconciler.yaml`, with this door.
    Manifest,
}

/// `plan`: which baselines, against which state, printed how.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(group(ArgGroup::new("state").required(true).args(["manifests", "cluster"])))]
pub struct PlanOptions {
    /// NamespaceBaseline manifests: a file (YAML, multi-document, or JSON; `kind: List` too)
    /// or a directory of them; repeatable. Without it: the NamespaceBaselines among
    /// --manifests, or those of the cluster with --cluster.
    #[arg(long, value_name = "FILE")]
    pub baseline: Vec<PathBuf>,

    /// Namespace and NetworkPolicy manifests (a file or a directory, YAML or JSON): plan
    /// offline against them, e.g. as a pre-merge check.
    #[arg(long, value_name = "PATH")]
    pub manifests: Option<PathBuf>,

    /// Plan against the live cluster of the kubeconfig (as `run` finds it), read-only: only
    /// GET and LIST requests.
    #[arg(long)]
    pub cluster: bool,

    /// The Kubewarden ClusterAdmissionPolicy of the Pod rule (podsWaitForWall), read from
    /// --manifests or the cluster: the guarded namespaces its namespaceSelector leaves out
    /// are named, since their pods are admitted before their wall exists.
    #[arg(long, value_name = "NAME", default_value = "namespace-baseline-pods")]
    pub pod_policy: String,

    /// Output format: text for people, json for machines.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    /// Resync interval: every baseline is reconciled at least this often ("5m", "300s" or
    /// seconds).
    #[arg(long, global = true, default_value = "5m", value_parser = parse_duration)]
    pub resync_interval: Duration,

    /// Address of the HTTP server (/healthz, /readyz, /metrics).
    #[arg(long, global = true, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// Elect a leader through a Lease (turn off only for a single replica).
    #[arg(
        long,
        global = true,
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub leader_election: bool,

    /// Name of the leader election Lease.
    #[arg(long, global = true, default_value = "namespace-baseline-reconciler")]
    pub lease_name: String,

    /// Namespace of the leader election Lease.
    #[arg(long, global = true, env = "POD_NAMESPACE", default_value = namespace_baseline_core::identity::RECONCILER_NAMESPACE)]
    pub lease_namespace: String,

    /// Holder identity in the Lease (default: the pod name, else hostname and a random suffix).
    #[arg(long, global = true, env = "POD_NAME")]
    pub identity: Option<String>,

    /// The leader election's clocks, checked together.
    #[command(flatten)]
    pub timing: ElectionClocks,

    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The namespace of the cluster's DNS Service (its Services, EndpointSlices and pods are
    /// watched there, for the DNSReachable condition; the RBAC grants read access there only);
    /// empty: no DNS check.
    #[arg(long, global = true, default_value = "kube-system")]
    pub dns_namespace: String,

    /// The reconciler's own NetworkPolicy (in the lease namespace), whose egress door to the
    /// API server is checked against the API server's endpoints; empty: not checked.
    #[arg(long, global = true)]
    pub api_door_policy: Option<String>,

    /// Write requests in flight within one reconcile: enough to keep the API server's
    /// server-side apply at its own floor during a pass, not more.
    #[arg(long, global = true, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Hedge a wall apply unanswered this long: send it again on a fresh connection and take
    /// the first answer (at most once per write, not while a 429's Retry-After runs, never
    /// while more than 16 writes are in flight). Well above a healthy apply's answer, well
    /// below a stalled one's; "0" turns hedging off.
    #[arg(long, global = true, default_value = "200ms", value_parser = parse_duration_or_zero)]
    pub hedge_after: Duration,

    /// Write an OpenReports Report per covered namespace while the openreports.io CRDs are
    /// served (found through discovery every 20 s); false: never ask, watch or write.
    #[arg(
        long,
        global = true,
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub openreports: bool,

    /// The enforcement probe (reconcile/probe/options.rs).
    #[command(flatten)]
    pub probe: crate::reconcile::probe::ProbeOptions,
}

/// The leader election's clocks as given on the command line, before they are checked
/// together ([`Timing::new`]).
#[derive(Debug, clap::Args)]
struct TimingFlags {
    /// How long a standby waits, after it last saw the Lease change (or go missing), before
    /// it takes the Lease over; whole seconds.
    #[arg(long, global = true, default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,

    /// How long after the start of its last successful renewal the leader may write; at least
    /// 2 s shorter than the lease duration (the write grace, half their difference, is 1 s at
    /// least).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    renew_deadline: Duration,

    /// How often the leader renews the Lease; shorter than the renew deadline, jitter
    /// (+10 %) included.
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    retry_period: Duration,
}

/// The leader election's clocks, checked together ([`Timing::new`]) as the command line is
/// parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionClocks(pub Timing);

/// Bad clocks are a usage error at parse time, with clap's message and exit code, rather
/// than an election that silently lets two replicas write.
impl FromArgMatches for ElectionClocks {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let flags = TimingFlags::from_arg_matches(matches)?;
        Timing::new(
            flags.lease_duration,
            flags.renew_deadline,
            flags.retry_period,
        )
        .map(Self)
        .map_err(|error| clap::Error::raw(ErrorKind::ArgumentConflict, error.to_string()))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for ElectionClocks {
    fn augment_args(command: clap::Command) -> clap::Command {
        TimingFlags::augment_args(command)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        TimingFlags::augment_args_for_update(command)
    }
}

/// A duration in humantime ("90s", "5m", "1h 30m") or in seconds ("300").
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    if duration.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(duration)
}

/// A duration ("300ms", "2s", or seconds), zero allowed (meaning off).
fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(seconds) => Ok(Duration::from_secs(seconds)),
        Err(_) => humantime::parse_duration(text).map_err(|error| error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use rstest::rstest;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("reconciler").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_is_the_default_with_documented_defaults() {
        let cli = parse(&[]);
        assert_eq!(cli.command, None);
        assert_eq!(cli.run.resync_interval, Duration::from_secs(300));
        assert_eq!(cli.run.listen, "0.0.0.0:8080".parse().unwrap());
        assert!(cli.run.leader_election);
        assert_eq!(cli.run.lease_name, "namespace-baseline-reconciler");
        assert_eq!(cli.run.log_format, LogFormat::Text);
        assert_eq!(cli.run.concurrency, 64);
        assert_eq!(cli.run.timing.0, Timing::DEFAULT);
        assert_eq!(cli.run.hedge_after, Duration::from_millis(200));
        assert_eq!(
            parse(&["--hedge-after", "0"]).run.hedge_after,
            Duration::ZERO
        );
    }

    #[test]
    fn election_clocks_parse_in_humantime() {
        let cli = parse(&[
            "--lease-duration=30s",
            "--renew-deadline=20s",
            "--retry-period",
            "500ms",
        ]);
        assert_eq!(
            cli.run.timing.0,
            Timing {
                lease_duration: Duration::from_secs(30),
                renew_deadline: Duration::from_secs(20),
                retry_period: Duration::from_millis(500),
            }
        );
    }

    #[rstest]
    #[case::renew_deadline_as_long_as_the_lease(&["--renew-deadline=15s"], "the renew deadline (15s) must end at least twice the minimum write grace (1s) before the lease duration (15s): the write grace, half their difference, is 0ns")]
    #[case::renew_deadline_past_the_lease(&["--lease-duration=10s", "--renew-deadline=12s"], "the renew deadline (12s) must end at least twice the minimum write grace (1s) before the lease duration (10s)")]
    #[case::retry_period_as_long_as_the_renew_deadline(&["--retry-period=10s"], "the retry period (10s, up to 11s with its 10 % jitter) must be shorter than the renew deadline (10s)")]
    #[case::retry_period_past_the_renew_deadline_with_its_jitter(&["--retry-period=9500ms"], "must be shorter than the renew deadline (10s)")]
    #[case::lease_duration_in_fractions_of_a_second(&["--lease-duration=15500ms"], "the lease duration must be a whole number of seconds")]
    fn bad_election_clocks_are_refused_with_a_message(
        #[case] args: &[&str],
        #[case] message: &str,
    ) {
        let error = Cli::try_parse_from(std::iter::once("reconciler").chain(args.iter().copied()))
            .expect_err("bad clocks were accepted");
        assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
        assert!(error.use_stderr(), "a usage error goes to stderr");
        let text = error.to_string();
        assert!(text.contains(message), "{text}");
    }

    #[test]
    fn flags_parse_before_or_after_the_subcommand() {
        let cli = parse(&[
            "run",
            "--leader-election=false",
            "--resync-interval",
            "90s",
            "--listen",
            "127.0.0.1:9000",
            "--lease-name",
            "l",
            "--lease-namespace",
            "ns",
            "--log-format",
            "json",
            "--concurrency",
            "4",
        ]);
        assert_eq!(cli.command, Some(Command::Run));
        assert!(!cli.run.leader_election);
        assert_eq!(cli.run.resync_interval, Duration::from_secs(90));
        assert_eq!(cli.run.lease_namespace, "ns");
        assert_eq!(cli.run.log_format, LogFormat::Json);
        assert_eq!(cli.run.concurrency, 4);
        assert_eq!(
            parse(&["--concurrency", "2", "crd"]).command,
            Some(Command::Crd)
        );
    }

    #[test]
    fn plan_takes_baselines_and_exactly_one_source_of_state() {
        let cli = parse(&[
            "plan",
            "--baseline",
            "a.yaml",
            "--baseline",
            "b.json",
            "--manifests",
            "cluster/",
            "-o",
            "json",
        ]);
        let Some(Command::Plan(options)) = cli.command else {
            panic!("not plan: {:?}", cli.command)
        };
        assert_eq!(
            options.baseline,
            vec![PathBuf::from("a.yaml"), PathBuf::from("b.json")]
        );
        assert_eq!(options.manifests, Some(PathBuf::from("cluster/")));
        assert!(!options.cluster);
        assert_eq!(options.output, OutputFormat::Json);

        let cli = parse(&["plan", "--cluster"]);
        let Some(Command::Plan(options)) = cli.command else {
            panic!("not plan")
        };
        assert!(options.cluster && options.baseline.is_empty());
        assert_eq!(options.output, OutputFormat::Text);
    }

    #[rstest]
    #[case(&["plan"])]
    #[case(&["plan", "--baseline", "a.yaml"])]
    #[case(&["plan", "--cluster", "--manifests", "m/"])]
    #[case(&["plan", "--cluster", "--output", "yaml"])]
    fn plan_refuses_a_missing_or_double_source(#[case] args: &[&str]) {
        assert!(
            Cli::try_parse_from(std::iter::once("reconciler").chain(args.iter().copied())).is_err()
        );
    }

    #[rstest]
    #[case("300", 300)]
    #[case("5m", 300)]
    #[case("1h 30m", 5400)]
    fn durations_in_seconds_or_humantime(#[case] text: &str, #[case] seconds: u64) {
        assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)));
    }

    #[rstest]
    #[case(&["--resync-interval", "0"])]
    #[case(&["--resync-interval", "soon"])]
    #[case(&["--concurrency", "0"])]
    #[case(&["--leader-election=maybe"])]
    fn bad_values_are_refused(#[case] args: &[&str]) {
        assert!(
            Cli::try_parse_from(std::iter::once("reconciler").chain(args.iter().copied())).is_err()
        );
    }
}
