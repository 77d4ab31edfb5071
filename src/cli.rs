//! Command-line types only; behaviour lives in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::profile::Provider;

#[derive(Debug, Parser)]
#[command(
    name = "devstack",
    version,
    about = "A complete local GitOps secrets stack with one command",
    long_about = "devstack brings up a Kubernetes cluster in Docker (K3s or Kind), LocalStack, Flux and \
the External Secrets Operator delivered through a race-free Flux chain, seeds AWS Secrets Manager \
and proves an ExternalSecret round trip.",
    after_help = "Exit codes: 0 ok, 1 unexpected failure, 2 user error (bad profile or input), \
3 missing prerequisite, 4 unhealthy stack, 130 interrupted."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Profile file, or a shipped profile name (dev, ci, demo) [env: DEVSTACK_PROFILE]
    #[arg(long, short = 'p', global = true, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Stack name, overriding the profile's `name` [env: DEVSTACK_NAME]
    #[arg(long, global = true, value_name = "NAME")]
    pub name: Option<String>,
    /// Cluster provider, overriding the profile [env: DEVSTACK_PROVIDER]
    #[arg(long, global = true, value_enum)]
    pub provider: Option<ProviderArg>,
    /// Kubeconfig context of an existing cluster to run the stack on (implies `--provider existing`) [env: DEVSTACK_CONTEXT]
    #[arg(long, global = true, value_name = "CONTEXT")]
    pub context: Option<String>,
    /// Offline bundle directory, overriding the profile [env: DEVSTACK_BUNDLE]
    #[arg(long, global = true, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// Machine-readable output on stdout
    #[arg(long, global = true)]
    pub json: bool,
    /// Only errors on stderr
    #[arg(long, short = 'q', global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail (-v, -vv); RUST_LOG gives full control
    #[arg(long, short = 'v', global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProviderArg {
    K3s,
    Kind,
    Existing,
}

impl From<ProviderArg> for Provider {
    fn from(p: ProviderArg) -> Self {
        match p {
            ProviderArg::K3s => Provider::K3s,
            ProviderArg::Kind => Provider::Kind,
            ProviderArg::Existing => Provider::Existing,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring the whole stack up (or converge it) and prove the ExternalSecret round trip
    #[command(
        long_about = "Bring the whole stack up (or converge it) and prove the ExternalSecret round \
trip: preflight, LocalStack (then seeding) and the cluster concurrently, the in-cluster LocalStack \
route, Flux, the External Secrets chain and the round trip, each step printed with its time. On an \
existing stack it repairs what drifted and says what. A stack this run created is rolled back on \
failure or Ctrl-C unless --retain.",
        after_help = "Examples:
  devstack up                                # the stack of ./devstack.yaml, or the built-in default
  devstack -p ci --name job1 up --no-verify  # another stack, from the shipped ci profile
  devstack up --timings up.html              # and a waterfall of where the time went"
    )]
    Up(UpArgs),
    /// Fetch every artifact the profile needs into the cache, each checked against its pin
    #[command(
        long_about = "Fetch every artifact the profile needs (node image, LocalStack, Flux's manifest \
and controller images, ESO's image, chart and CRDs) into devstack's cache, each checked against the \
digest or checksum devstack pins; a mismatch is refused and nothing of it is kept. `up` does this \
by itself before it creates anything; run `pull` ahead of time (a CI cache step) or with \
`--bundle DIR` to write a portable bundle (with the kind CLI) for a machine without network, which \
uses it through DEVSTACK_BUNDLE. Mirrors: `images.mirrors` / DEVSTACK_MIRRORS for images, \
DEVSTACK_DOWNLOAD_MIRROR for downloads."
    )]
    Pull,
    /// Remove the stack: cluster, LocalStack, network, volumes, kubeconfig context
    Down(DownArgs),
    /// Check that this machine can run the profile
    Doctor,
    /// Validate, show and list profiles
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Manage the stack's LocalStack (a container beside the cluster, or a Deployment in it)
    #[command(subcommand)]
    Localstack(LocalstackCommand),
    /// Manage the stack's Kubernetes cluster (K3s in Docker or Kind)
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Create or update the profile's secrets in LocalStack's Secrets Manager
    Seed(SeedArgs),
    /// Prove the secret path end to end with a fresh random probe
    #[command(
        long_about = "Prove the secret path end to end with a fresh random probe: a randomly named \
secret written to LocalStack is synced into the cluster by an ExternalSecret, rotated (refreshed at \
once through the force-sync annotation) and recreated by ESO after its Kubernetes Secret is deleted; \
every ExternalSecret the profile declares must be synced. Probe objects are removed afterwards and \
probe values never appear in output. Exit 4 when a check fails."
    )]
    Verify(VerifyArgs),
    /// Show the health of every part of the stack
    #[command(
        long_about = "Show the health of every part of the stack: the cluster and its nodes, \
LocalStack, the Flux controllers, the Kustomization chain, the ESO HelmRelease, the \
ClusterSecretStore and every ExternalSecret. A Flux object re-applying a revision it already \
applied is shown as reconciling: healthy, but not settled. Exit 4 when anything is unhealthy. \
`--wait` waits until the stack is settled (everything Ready, nothing reconciling), for scripts: \
exit 0 when settled, 4 when something is still failing at the deadline, 5 when it is healthy \
but still reconciling at the deadline.",
        after_help = "Examples:
  devstack status                           # one table; exit 4 when anything is unhealthy
  devstack status --wait 2m                 # in a script: until settled, at most 2 minutes
  devstack -p ci --name job1 status --json  # rows, ports, healthy and settled, for tools"
    )]
    Status(StatusArgs),
    /// Find what is wrong with the stack, why, and the command that fixes it
    #[command(
        long_about = "Find what is wrong with the stack, why, and the command that fixes it: the \
runbooks of the External Secrets platform, automated. Every detector runs against the stack (Docker, \
LocalStack, nodes, Flux, the chain, ESO and its webhook, the ClusterSecretStore, every \
ExternalSecret) and each finding is printed as its symptom, the evidence (conditions, events, \
container states, a few log lines; never a secret value), the cause and the fix. `--json` prints \
the findings as a list. Exit 0 when nothing is found, 4 when something is.",
        after_help = "Examples:\n  devstack diagnose                  # every finding, with its fix\n  \
devstack -p ci diagnose --json     # the findings as a JSON list, for scripts\n  \
devstack status || devstack diagnose"
    )]
    Diagnose,
    /// Print the logs of the stack's components, each line prefixed by its source
    #[command(
        long_about = "Print the logs of the stack's components: LocalStack's container, the External \
Secrets Operator's controller, webhook and cert-controller pods, each Flux controller's pod and the \
cluster's node containers, read through the Docker and Kubernetes APIs (no kubectl). Without a \
COMPONENT every component's logs are merged in the order they were written, each line prefixed by \
its source (`eso/webhook | ...`); a component with one source prints its lines bare. With -f every \
source is followed at once and lines are printed as they arrive, until Ctrl-C (exit 0).",
        after_help = "Examples:
  devstack logs eso --since 10m        # what the operator said in the last 10 minutes
  devstack logs -f                     # every component, as it happens, until Ctrl-C
  devstack logs flux --tail 20 --json  # one JSON object a line: source, time, line"
    )]
    Logs(LogsArgs),
    /// Print shell exports for using the stack from other tools
    Env(EnvArgs),
    /// Print the stack's kubeconfig, or with --path its file's path
    Kubeconfig(KubeconfigArgs),
    /// Install Flux if needed, publish the GitOps manifests and wait until the External Secrets chain is Ready
    Sync(SyncArgs),
    /// Show devstack's version and the version matrix (defaults, tested here, newest upstream, support)
    Version,
    /// Save a verified K3s stack's cluster, and list, remove, export or import snapshots
    #[command(
        subcommand,
        long_about = "Save a verified K3s stack's cluster as a snapshot, and list, remove, export or \
import snapshots. `devstack up --from-snapshot NAME` creates a stack from one in seconds: the \
cluster from the snapshot, LocalStack new and seeded from the profile, then Flux and ESO reconciled \
and the round trip proven. A snapshot is refused when it was made from another profile, other \
versions or another snapshot format, or when a file fails its checksum. Snapshots hold the \
cluster's credentials and synced Secrets: keep exported files private.",
        after_help = "Examples:
  devstack -p ci snapshot save base                   # keep the verified ci stack's cluster
  devstack -p ci --name job2 up --from-snapshot base  # a second stack from it, in seconds
  devstack snapshot export base base.tar              # one file for a CI cache, for `import`"
    )]
    Snapshot(SnapshotCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    #[command(
        long_about = "Print a completion script for SHELL on stdout. Load it for this shell with \
`source <(devstack completions bash)` (zsh: `source <(devstack completions zsh)`; fish: \
`devstack completions fish | source`), or install it where your shell looks for completions."
    )]
    Completions {
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print devstack's man page, or a command's (`devstack man snapshot save`)
    Man(ManArgs),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Verify the stack, then save its cluster as snapshot NAME (default: the stack's name), replacing one of that name
    Save {
        /// Snapshot name (lowercase letters, digits, `.`, `_`, `-`)
        #[arg(value_name = "NAME")]
        snapshot: Option<String>,
    },
    /// List the snapshots on this machine
    List,
    /// Remove a snapshot
    Rm {
        #[arg(value_name = "NAME")]
        snapshot: String,
    },
    /// Pack a snapshot into one file (for a CI cache), checking every checksum
    Export {
        #[arg(value_name = "NAME")]
        snapshot: String,
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Add the snapshot packed in FILE, as NAME (default: its saved name), checking every checksum
    Import {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(value_name = "NAME")]
        snapshot: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Validate profile files strictly
    Validate {
        /// Profile files
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Show the fully resolved settings (defaults filled in, secrets masked)
    Show {
        /// Also show where each overridable value came from
        #[arg(long)]
        origins: bool,
    },
    /// List the shipped profiles
    List,
}

#[derive(Debug, Subcommand)]
pub enum LocalstackCommand {
    /// Start LocalStack (reuse, restart or recreate as needed) and wait until healthy
    Up {
        /// LocalStack host port (a number, or `auto` for a free one), overriding the profile [env: DEVSTACK_LOCALSTACK_PORT]
        #[arg(long)]
        port: Option<crate::profile::HostPort>,
        /// LocalStack image, overriding the profile [env: DEVSTACK_LOCALSTACK_IMAGE]
        #[arg(long)]
        image: Option<String>,
    },
    /// Remove the LocalStack container (and the network when nothing else uses it)
    Down,
    /// Print LocalStack's logs (its container's, or its pod's in the cluster)
    Logs {
        /// Only the last N lines
        #[arg(long, default_value_t = 200)]
        tail: usize,
        /// Keep streaming new lines
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Show where LocalStack runs and its services' health
    Status,
    /// Keep a port-forward to LocalStack in the cluster open in the foreground and print the `env` lines for it
    #[command(
        long_about = "Keep a port-forward to LocalStack in the cluster (`localstack.mode: in-cluster`) open \
in the foreground, through the Kubernetes API (no kubectl), and print the `devstack env` lines for it, \
so that other tools on this machine reach it. Ctrl-C closes it.",
        after_help = "Examples:
  devstack localstack forward --port 4566      # then, in another shell:
  AWS_ENDPOINT_URL=http://127.0.0.1:4566 aws secretsmanager list-secrets"
    )]
    Forward {
        /// Local port to listen on (default: a free one)
        #[arg(long)]
        port: Option<u16>,
        /// Print the variables for this shell (sh, fish or json)
        #[arg(long, value_enum, default_value_t = ShellKind::Sh)]
        shell: ShellKind,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Create the cluster (or converge an existing one) and wait for every node Ready
    Up {
        /// Keep a half-created cluster on failure or Ctrl-C, for debugging
        #[arg(long)]
        retain: bool,
        /// Recreate the cluster when it differs from the profile in what cannot change in place
        #[arg(long)]
        recreate: bool,
    },
    /// Remove the cluster, its volumes and its kubeconfig context
    Down,
}

#[derive(Debug, Args)]
pub struct SeedArgs {
    /// Generate new values for `generate` secrets
    #[arg(long)]
    pub rotate: bool,
    /// Report what would change without writing
    #[arg(long)]
    pub dry_run: bool,
    /// Concurrent requests to Secrets Manager
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Keep a half-created stack on failure or Ctrl-C, for debugging
    #[arg(long)]
    pub retain: bool,
    /// Skip the round trip at the end (default: the profile's `verify.onUp`)
    #[arg(long)]
    pub no_verify: bool,
    /// Recreate the cluster when it differs from the profile in what cannot change in place (node image, Kubernetes version, Kind node count, ports); LocalStack and its secrets are kept
    #[arg(long)]
    pub recreate: bool,
    /// Write a waterfall of every step's and sub-step's start and end to FILE (a self-contained HTML page), also when `up` fails
    #[arg(long, value_name = "FILE.html")]
    pub timings: Option<std::path::PathBuf>,
    /// Create the stack from snapshot NAME (`devstack snapshot save`) instead of from scratch (K3s; the stack must not exist)
    #[arg(long, value_name = "NAME", conflicts_with = "recreate")]
    pub from_snapshot: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Wait until the stack is settled, at most DURATION (e.g. 90s, 5m; default 5m)
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "5m")]
    pub wait: Option<crate::profile::HumanDuration>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Only this component's logs (default: every component's, merged)
    #[arg(value_enum, value_name = "COMPONENT")]
    pub component: Option<LogComponent>,
    /// Only the last N lines of each source (default: 200, or every line with --since)
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Keep printing new lines of every source until Ctrl-C
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only lines written in the last DURATION (e.g. 90s, 10m, 1h)
    #[arg(long, value_name = "DURATION")]
    pub since: Option<crate::profile::HumanDuration>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogComponent {
    /// The LocalStack container
    Localstack,
    /// The External Secrets Operator's controller, webhook and cert-controller
    Eso,
    /// Each Flux controller
    Flux,
    /// The cluster's node containers
    Node,
}

impl From<LogComponent> for crate::logs::Component {
    fn from(c: LogComponent) -> Self {
        use crate::logs::Component;
        match c {
            LogComponent::Localstack => Component::Localstack,
            LogComponent::Eso => Component::Eso,
            LogComponent::Flux => Component::Flux,
            LogComponent::Node => Component::Node,
        }
    }
}

#[derive(Debug, Args)]
pub struct KubeconfigArgs {
    /// Print the kubeconfig file's path instead of its contents
    #[arg(long)]
    pub path: bool,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print, e.g. `up` or `snapshot save` (default: devstack's own)
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write the pages of devstack and every command into DIR instead (for packaging)
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DownArgs {
    /// Remove every devstack stack on this machine (by label), and nothing else
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Leave reconcile timing to Flux instead of nudging each level as the previous one turns Ready (for comparison)
    #[arg(long)]
    pub no_nudge: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Also push a value to LocalStack with a PushSecret (default: the profile's `verify.pushSecret`)
    #[arg(long)]
    pub push_secret: bool,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = ShellKind::Sh)]
    pub shell: ShellKind,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ShellKind {
    /// POSIX sh / bash / zsh
    Sh,
    Fish,
    Json,
}
