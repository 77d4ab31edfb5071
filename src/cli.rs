//! Command-line types only; behaviour lives in `commands/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::error::Kind;
use crate::profile::Provider;

mod global;
use crate::signals::Signal;
pub use global::{
    command, documented_command, refuse_unused_options, unused_global_options,
    usage_error_with_hint,
};

/// The examples of `devstack --help` and of the man page.
pub const EXAMPLES: &str = "Examples:
  devstack up                      # a verified stack from ./devstack.yaml, or the default one
  devstack status                  # its health; exit 4 when a part is failing
  devstack -p ci --name job1 up    # a second stack beside it, from the shipped ci profile
  devstack list                    # the stacks on this machine, and their state
  devstack down --all              # remove every devstack stack, and nothing else";

/// Every exit code the binary uses, with what it means. Each error kind's
/// code comes from [`Kind::exit_code`] (an interrupt's from its signal's,
/// [`Signal::exit_code`]), and the match names every kind, so a new kind
/// does not build until it is described here.
pub fn exit_codes() -> Vec<(i32, &'static str)> {
    let kinds = [
        Kind::Internal,
        Kind::User,
        Kind::Prerequisite,
        Kind::Unhealthy,
        Kind::Timeout,
        Kind::Interrupted,
    ];
    let described = kinds.into_iter().flat_map(|kind| {
        let meaning = match kind {
            Kind::Internal => "unexpected failure: an API failed, a bug",
            Kind::User => {
                "usage or input error: an unknown flag, a bad profile, an unreadable file"
            }
            Kind::Prerequisite => {
                "missing prerequisite: Docker, kind, a free port, an artifact matching its pin"
            }
            Kind::Unhealthy => "unhealthy stack: status or diagnose finds a problem, verify fails",
            Kind::Timeout => {
                "timeout: a wait passed its deadline (`status --wait`: still reconciling)"
            }
            Kind::Interrupted => {
                return Signal::ALL
                    .into_iter()
                    .map(|signal| (signal.exit_code(), interrupted_by(signal)))
                    .collect();
            }
        };
        vec![(kind.exit_code(), meaning)]
    });
    std::iter::once((0, "success")).chain(described).collect()
}

/// An interrupt's exit code is 128 + its signal's number.
fn interrupted_by(signal: Signal) -> &'static str {
    match signal {
        Signal::Hangup => "interrupted by SIGHUP (the terminal closed), as by Ctrl-C",
        Signal::Interrupt => {
            "interrupted by Ctrl-C (SIGINT); `up` rolls back all it created, even on a second signal"
        }
        Signal::Terminate => "interrupted by SIGTERM (`timeout`, a cancelled CI job), as by Ctrl-C",
    }
}

/// `devstack --help`'s last part: the examples and every exit code.
fn after_help() -> String {
    let codes: Vec<String> = exit_codes()
        .into_iter()
        .map(|(code, meaning)| format!("  {code:<4} {meaning}"))
        .collect();
    format!("{EXAMPLES}\n\nExit codes:\n{}", codes.join("\n"))
}

#[derive(Debug, Parser)]
#[command(
    name = "devstack",
    version = crate::versions::build::LONG,
    about = "A complete local GitOps secrets stack with one command",
    long_about = "devstack brings up a Kubernetes cluster in Docker (K3s or Kind), LocalStack, Flux and \
the External Secrets Operator delivered through a race-free Flux chain, seeds AWS Secrets Manager \
and proves an ExternalSecret round trip.",
    after_help = after_help()
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
    #[arg(long, short = 'p', global = true, help_heading = GLOBAL_OPTIONS, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Stack name, overriding the profile's `name` [env: DEVSTACK_NAME]
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS, value_name = "NAME")]
    pub name: Option<String>,
    /// Cluster provider, overriding the profile [env: DEVSTACK_PROVIDER]
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS, value_enum)]
    pub provider: Option<ProviderArg>,
    /// Kubeconfig context of an existing cluster to run the stack on (implies `--provider existing`) [env: DEVSTACK_CONTEXT]
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS, value_name = "CONTEXT")]
    pub context: Option<String>,
    /// Offline bundle directory, overriding the profile [env: DEVSTACK_BUNDLE]
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS, value_name = "DIR")]
    pub bundle: Option<PathBuf>,
    /// Machine-readable output on stdout
    #[arg(long, global = true, help_heading = GLOBAL_OPTIONS)]
    pub json: bool,
    /// Only errors on stderr
    #[arg(long, short = 'q', global = true, help_heading = GLOBAL_OPTIONS, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More detail (-v, -vv); RUST_LOG gives full control
    #[arg(long, short = 'v', global = true, help_heading = GLOBAL_OPTIONS, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The heading of the options every command takes, listed after the
/// command's own.
pub const GLOBAL_OPTIONS: &str = "Global options";

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
failure, Ctrl-C, SIGTERM or SIGHUP unless --retain, to the end: a second signal does not stop it. \
Exit 0 once the stack is verified, 2 for a bad profile or a change only --recreate makes, 3 when \
Docker, a binary, a free port or an artifact is missing, 4 when the round trip fails, 5 when a wait \
passes its deadline, 130 after Ctrl-C, 143 after SIGTERM, 129 after SIGHUP (128 + the signal).",
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
DEVSTACK_DOWNLOAD_MIRROR for downloads. Exit 3 when an artifact cannot be fetched or does not \
match its pin.",
        after_help = "Examples:
  devstack pull                          # the cache for ./devstack.yaml's stack (a CI cache step)
  devstack -p ci pull --bundle ./bundle  # a portable bundle, for a machine without network
  DEVSTACK_BUNDLE=./bundle devstack -p ci up"
    )]
    Pull,
    /// Remove the stack: its cluster, LocalStack, network, volumes, kubeconfig context and files
    #[command(
        long_about = "Remove the stack: its cluster, LocalStack, network, volumes, kubeconfig context \
and files, by devstack's labels. On an existing cluster (`--provider existing`) the cluster stays \
and what the stack put there is removed. Exit 0 also when there was nothing to remove, 3 when the \
Docker engine does not answer.",
        after_help = "Examples:
  devstack down                   # the stack of ./devstack.yaml, or the built-in default
  devstack -p ci --name job1 down # the stack `job1`, made from the ci profile
  devstack down --all             # every devstack stack on this machine, and nothing else"
    )]
    Down(DownArgs),
    /// Stop the stack's containers, keeping all else: no memory, no CPU until `start`
    #[command(
        long_about = "Stop the stack's containers (its K3s or Kind nodes and its LocalStack) at \
once, each given 2 s to end on its stop signal before it is killed; volumes, network, kubeconfig \
and record stay, and `devstack start` brings the stack back. It is refused while another run \
(an `up`) works on the stack. Exit 0 also when it was stopped already, 2 on a cluster devstack did not \
create, 3 when Docker does not answer or another run holds the stack, 4 when the stack does not \
exist or its containers were removed.",
        after_help = "Examples:
  devstack stop                     # free the stack's memory and CPU, keeping it
  devstack -p ci --name job1 stop --json"
    )]
    Stop,
    /// Start a stopped stack to a verified round trip (a running one converges as with `up`)
    #[command(
        long_about = "Start a stopped stack (after `devstack stop`, or a machine restart) and bring it \
back to a verified round trip: `up` on the existing stack, which starts its nodes and LocalStack \
and repairs what the stop left (LocalStack's secrets re-seeded, the GitOps source re-published, \
crashed pods recreated), each repair said. On a running stack it converges as `up` does. Exit 0 \
once verified, 2 on a cluster devstack did not create, 3 when Docker does not answer, 4 when the \
stack does not exist or its cluster was removed (`devstack up` recreates it) or the round trip \
fails, 5 when a wait passes its deadline, 128 + the signal's number when a signal stops it.",
        after_help = "Examples:
  devstack start                    # the stopped stack, verified again
  devstack start --no-verify        # started and converged, without the round trip"
    )]
    Start(StartArgs),
    /// List the stacks on this machine and the state of their containers
    #[command(
        visible_alias = "ls",
        long_about = "List the stacks on this machine: those devstack keeps a record of in its \
state directory (DEVSTACK_HOME), whatever their profile, and those whose containers carry its \
labels though their record was lost. For each, the Docker engine is asked for its containers: \
running, partial (some stopped), stopped, missing (recorded, no container) or unknown (the engine \
does not answer, which is a warning, not a failure). `--json` adds each stack's provider, host \
ports and kubeconfig file. Nothing on stdout, and exit 0, when there is none.",
        after_help = "Examples:
  devstack list                                  # NAME, STATE, PROVIDER and a note
  devstack ls --json                             # with ports and the kubeconfig path
  devstack ls --json | jq -r '.stacks[] | select(.state == \"running\") | .name'"
    )]
    List,
    /// Check that this machine can run the profile
    #[command(after_help = "Examples:
  devstack doctor                 # for ./devstack.yaml's stack; exit 3 when it cannot run here,
                                  # 2 when `up` would refuse its input (pins, bundle, profile)
  devstack -p ci doctor --json    # every check as JSON, for a CI step")]
    Doctor,
    /// Validate, show and list profiles
    #[command(
        subcommand,
        after_help = "Examples:
  devstack profile list                 # the shipped profiles: dev, ci, demo
  devstack profile validate devstack.yaml ci
  devstack -p ci profile show --origins # the resolved ci profile, and where each value came from"
    )]
    Profile(ProfileCommand),
    /// Manage the stack's LocalStack (a container beside the cluster, or a Deployment in it)
    #[command(
        subcommand,
        after_help = "Examples:
  devstack localstack status        # where LocalStack runs and its services' health
  devstack localstack logs -f       # its log, as it happens
  devstack localstack up --port 4566"
    )]
    Localstack(LocalstackCommand),
    /// Manage the stack's Kubernetes cluster in Docker (K3s or Kind)
    #[command(
        subcommand,
        after_help = "Examples:
  devstack cluster up               # the cluster alone, every node Ready
  devstack cluster up --recreate    # after changing the node image or the node count
  devstack cluster down"
    )]
    Cluster(ClusterCommand),
    /// Create or update the profile's secrets in LocalStack's Secrets Manager
    #[command(
        long_about = "Create or update the profile's secrets in LocalStack's Secrets Manager, its \
parameters in SSM Parameter Store and, with `eso.auth: serviceAccount`, the role ESO assumes; \
unchanged ones are left alone. Every source is read before anything is written. Exit 2 when a \
source cannot be read or a value is over its service's limits, 4 when the stack's LocalStack is \
not there.",
        after_help = "Examples:
  devstack seed --dry-run           # what would be created or updated, writing nothing
  devstack seed                     # create or update the profile's secrets
  devstack seed --rotate            # new values for the `generate` secrets"
    )]
    Seed(SeedArgs),
    /// Prove the secret path end to end with a fresh random probe
    #[command(
        long_about = "Prove the secret path end to end with a fresh random probe: a randomly named \
secret written to LocalStack is synced into the cluster by an ExternalSecret, rotated (refreshed at \
once through the force-sync annotation) and recreated by ESO after its Kubernetes Secret is deleted; \
every ExternalSecret the profile declares must be synced. Probe objects are removed afterwards and \
probe values never appear in output. Exit 4 when a check fails.",
        after_help = "Examples:
  devstack verify                   # the round trip; exit 4 when a check fails
  devstack verify --push-secret     # and a PushSecret back to LocalStack"
    )]
    Verify(VerifyArgs),
    /// Show the health of every part of the stack
    #[command(
        long_about = "Show the health of every part of the stack: the cluster and its nodes, \
LocalStack, the Flux controllers, the Kustomization chain, the ESO HelmRelease, the \
ClusterSecretStore and every ExternalSecret. A Flux object re-applying a revision it already \
applied is shown as reconciling: healthy, but not settled. A stopped stack's rows say `stopped`. \
Exit 4 when anything is unhealthy or stopped. \
`--wait` waits until the stack is settled (everything Ready, nothing reconciling), for scripts: \
exit 0 when settled, 4 when something is still failing at the deadline, 5 when it is healthy \
but still reconciling at the deadline, 128 + the signal's number when Ctrl-C, SIGTERM or SIGHUP \
stops the wait.",
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
source is followed at once and lines are printed as they arrive, until Ctrl-C, SIGTERM or SIGHUP \
(exit 0).",
        after_help = "Examples:
  devstack logs eso --since 10m        # what the operator said in the last 10 minutes
  devstack logs -f                     # every component, as it happens, until Ctrl-C
  devstack logs flux --tail 20 --json  # one JSON object a line: source, time, line"
    )]
    Logs(LogsArgs),
    /// Print shell exports for using the stack from other tools
    #[command(
        long_about = "Print shell exports for using the stack from other tools: AWS_ENDPOINT_URL \
(on the port the stack was given), the region, test credentials, DEVSTACK_STACK, once the \
stack has a cluster KUBECONFIG, and with `registry.enabled` DEVSTACK_REGISTRY (`localhost:<port>`). Exit 4 before the stack's LocalStack exists (its `auto` port is \
not known yet), 2 with `localstack.mode: in-cluster`, which has no host port (`devstack \
localstack forward` prints the same lines).",
        after_help = "Examples:
  eval \"$(devstack env)\"            # AWS_ENDPOINT_URL and friends for this shell
  devstack env --shell fish | source
  devstack env --json               # the same as one JSON object"
    )]
    Env(EnvArgs),
    /// Put images from this machine's Docker into the stack's nodes, without a registry
    #[command(
        long_about = "Put images from this machine's Docker image store into every node of the \
stack's cluster, as `kind load docker-image` and `k3d image import` do, through the import `up` \
uses for `images.preload`; a name a node already holds is replaced, so a rebuilt image takes the \
old one's place. Pods use the reference as given, with `imagePullPolicy: IfNotPresent` or `Never` \
(a `:latest` tag defaults to `Always`, which pulls). Nothing is loaded unless every image exists \
locally. Exit 2 for an image not in the local store or on a cluster devstack did not create, 3 \
when Docker does not answer, 4 when the stack has no cluster.",
        after_help = "Examples:
  docker build -t myapp:dev . && devstack load myapp:dev
  devstack load myapp:dev worker:dev    # several at once"
    )]
    Load(LoadArgs),
    /// Print the facts Flux substitutes in the stack's manifests, with where each comes from
    #[command(
        long_about = "Print the facts the stack publishes for Flux's `postBuild.substituteFrom`: \
devstack's own (LocalStack's endpoint, the region, each seeded secret's ARN, ...) and the profile's \
`facts` (values, dotenv files, Terraform outputs, environment variables), each with its source. \
Sensitive facts are never printed: they are shown as <sensitive>, and on a running stack their \
values are in the facts' Secret (`kubectl -n flux-system get secret <facts.secret> -o yaml`). \
`--dotenv` prints KEY='value' lines for the environment of `flux envsubst --strict`, which renders \
a file or the output of `flux build kustomization --dry-run` offline with the same values. Works \
before the stack exists. Exit 2 when a fact's source (a file, a Terraform output, a variable) \
cannot be read.",
        after_help = "Examples:
  devstack facts                        # every fact, its value and its source
  devstack facts --json                 # the same as JSON, for scripts
  set -a; . <(devstack facts --dotenv); set +a; flux envsubst --strict < apps/config.yaml"
    )]
    Facts(FactsArgs),
    /// Print the stack's kubeconfig, or with --path its file's path
    #[command(
        long_about = "Print the stack's kubeconfig (context devstack-NAME), or with --path its \
file's path. Exit 4 when the stack has no cluster.",
        after_help = "Examples:
  export KUBECONFIG=\"$(devstack kubeconfig --path)\"
  devstack kubeconfig > stack.kubeconfig   # the file's contents: credentials, keep it private"
    )]
    Kubeconfig(KubeconfigArgs),
    /// Install Flux if needed, publish the GitOps manifests and wait until the External Secrets chain is Ready
    #[command(
        long_about = "Install Flux if needed, publish the GitOps manifests to the stack's source and \
wait until the External Secrets chain is Ready again, with each level's time. Exit 2 when a \
manifest does not build or apply, 4 when the stack has no cluster or LocalStack or a level fails, \
5 when the chain is not Ready within its timeout.",
        after_help = "Examples:
  devstack sync                     # after editing the GitOps manifests
  devstack sync --no-nudge          # leave the timing to Flux, for comparison"
    )]
    Sync(SyncArgs),
    /// Show devstack's version and the version matrix (defaults, tested here, newest upstream, support)
    #[command(after_help = "Examples:
  devstack version                  # the matrix, one block per component
  devstack version --json           # with every pin: a CI cache key")]
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
  devstack -p ci snapshot save base                     # keep the verified ci stack's cluster
  devstack -p ci --name job2 up --from-snapshot base    # a second stack from it, in seconds
  devstack snapshot export base base.devstack-snapshot  # one file for a CI cache, for `import`"
    )]
    Snapshot(SnapshotCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    #[command(
        long_about = "Print a completion script for SHELL on stdout. Load it for this shell with \
`source <(devstack completions bash)` (zsh: `source <(devstack completions zsh)`; fish: \
`devstack completions fish | source`), or install it where your shell looks for completions, as \
below, and open a new shell.",
        after_help = COMPLETIONS_EXAMPLES
    )]
    Completions {
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print devstack's man page, or a command's (`devstack man snapshot save`)
    #[command(after_help = "Examples:
  devstack man | man -l -           # read devstack's page now
  devstack man snapshot save | man -l -
  devstack man --out-dir ~/.local/share/man/man1   # every page, for `man devstack`")]
    Man(ManArgs),
}

/// Where bash, zsh and fish look for completions a user installs, as
/// commands that install there.
pub const COMPLETIONS_EXAMPLES: &str = "Examples:
  source <(devstack completions bash)   # this shell only
  devstack completions bash > ~/.local/share/bash-completion/completions/devstack
  devstack completions zsh > ~/.zfunc/_devstack
  devstack completions fish > ~/.config/fish/completions/devstack.fish

zsh reads ~/.zfunc when ~/.zshrc has `fpath=(~/.zfunc $fpath)` before `compinit`.
For every user: /usr/share/bash-completion/completions/devstack, \
/usr/local/share/zsh/site-functions/_devstack, /usr/share/fish/vendor_completions.d/devstack.fish.";

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Verify the stack, then save its cluster as snapshot NAME (default: the stack's name), replacing one of that name
    #[command(
        long_about = "Verify the stack, then save its cluster as snapshot NAME (default: the \
stack's name), replacing one of that name; the stack keeps running. Exit 2 for a stack that is not \
K3s or a bad NAME, 4 when the stack does not exist or fails the round trip.",
        after_help = "Examples:
  devstack -p ci snapshot save base  # the verified ci stack's cluster, as `base`
  devstack snapshot save             # the stack's, named after the stack"
    )]
    Save {
        /// Snapshot name (lowercase letters, digits, `.`, `_`, `-`)
        #[arg(value_name = "NAME")]
        snapshot: Option<String>,
    },
    /// List the snapshots on this machine
    #[command(after_help = "Examples:
  devstack snapshot list
  devstack snapshot list --json      # every snapshot's details, for scripts")]
    List,
    /// Remove a snapshot
    #[command(after_help = "Examples:
  devstack snapshot rm base          # a volume in use stays until its stack's `down`")]
    Rm {
        /// The snapshot to remove (`devstack snapshot list` names them)
        #[arg(value_name = "NAME")]
        snapshot: String,
    },
    /// Pack a snapshot into one file (for a CI cache), checking every checksum
    #[command(after_help = "Examples:
  devstack snapshot export base base.devstack-snapshot   # holds credentials: keep it private")]
    Export {
        /// The snapshot to pack (`devstack snapshot list` names them)
        #[arg(value_name = "NAME")]
        snapshot: String,
        /// The file to write, replaced if it exists
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Add the snapshot packed in FILE, as NAME (default: its saved name), checking every checksum
    #[command(after_help = "Examples:
  devstack snapshot import base.devstack-snapshot        # as the name it was saved under
  devstack snapshot import base.devstack-snapshot base2  # under another name")]
    Import {
        /// A file `devstack snapshot export` wrote
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The name to add it under; refused when a snapshot has it (default: its saved name)
        #[arg(value_name = "NAME")]
        snapshot: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Validate profiles strictly: files, or shipped profile names
    #[command(after_help = "Examples:
  devstack profile validate devstack.yaml       # every error, with file:line:column; exit 2
  devstack profile validate ci                  # the shipped ci profile
  devstack profile validate a.yaml b.yaml --json")]
    Validate {
        /// Profile files, or shipped profile names (dev, ci, demo); a file of that name wins
        #[arg(required = true, value_name = "PROFILE")]
        files: Vec<PathBuf>,
    },
    /// Show the fully resolved settings (defaults filled in, secrets masked)
    #[command(
        long_about = "Show the fully resolved settings (defaults filled in, secrets masked), as a \
run on the stack uses them. Exit 2 for a bad profile.",
        after_help = "Examples:
  devstack profile show                     # ./devstack.yaml's, or the built-in default's
  devstack -p ci --name job1 profile show --origins"
    )]
    Show {
        /// Also show where each overridable value came from
        #[arg(long)]
        origins: bool,
    },
    /// List the shipped profiles
    #[command(after_help = "Examples:
  devstack profile list
  devstack profile list --json")]
    List,
}

#[derive(Debug, Subcommand)]
pub enum LocalstackCommand {
    /// Start LocalStack (reuse, restart or recreate as needed) and wait until healthy
    #[command(
        long_about = "Start LocalStack (reuse, restart or recreate as needed) and wait until \
healthy. Exit 3 when Docker does not answer or the port is taken, 5 when LocalStack is not healthy \
within `timeouts.localstack`, 128 + the signal's number when Ctrl-C, SIGTERM or SIGHUP interrupts it. \
A container this run created is removed when it fails or is interrupted, unless --retain.",
        after_help = "Examples:
  devstack localstack up                 # on the stack's port (`auto`: the one it was given)
  devstack localstack up --port 4566     # on a fixed port instead
  devstack localstack up --retain        # keep a container that does not start, to look at it"
    )]
    Up {
        /// LocalStack host port (a number, or `auto` for a free one), overriding the profile [env: DEVSTACK_LOCALSTACK_PORT]
        #[arg(long)]
        port: Option<crate::profile::HostPort>,
        /// LocalStack image, overriding the profile [env: DEVSTACK_LOCALSTACK_IMAGE]
        #[arg(long)]
        image: Option<String>,
        /// Keep a container this run created when it fails or a signal (Ctrl-C, SIGTERM, SIGHUP) stops it, for debugging
        #[arg(long)]
        retain: bool,
    },
    /// Remove the LocalStack container (and the network when nothing else uses it)
    #[command(
        long_about = "Remove the LocalStack container (and the network when nothing else uses it). \
Exit 0 also when it was not there, 2 with `localstack.mode: in-cluster` (Flux would bring it back: \
`devstack down` removes the whole stack).",
        after_help = "Examples:
  devstack localstack down          # `devstack up` brings it back, seeded"
    )]
    Down,
    /// Print LocalStack's logs (its container's, or its pod's in the cluster), as `devstack logs localstack`
    #[command(
        long_about = "Print LocalStack's logs: its container's, or its pod's in the cluster \
(`localstack.mode: in-cluster`); the same as `devstack logs localstack`. Exit 4 when the stack has \
no LocalStack.",
        after_help = "Examples:
  devstack localstack logs --tail 50
  devstack localstack logs --since 10m   # what it said in the last 10 minutes
  devstack localstack logs -f"
    )]
    Logs(LogLines),
    /// Show where LocalStack runs and its services' health
    #[command(after_help = "Examples:
  devstack localstack status        # exit 4 when a service is not available
  devstack localstack status --json")]
    Status,
    /// Keep a port-forward to LocalStack in the cluster open in the foreground and print the `env` lines for it
    #[command(
        long_about = "Keep a port-forward to LocalStack in the cluster (`localstack.mode: in-cluster`) open \
in the foreground, through the Kubernetes API (no kubectl), and print the `devstack env` lines for it, \
so that other tools on this machine reach it. Ctrl-C, SIGTERM or SIGHUP closes it, with exit 0. Exit \
2 when LocalStack \
is a container (there is nothing to forward), 4 when it does not answer through the forward.",
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
    #[command(
        long_about = "Create the cluster (or converge an existing one) and wait for every node \
Ready. Exit 2 for a change only --recreate makes, 3 when Docker, kind or an artifact is missing, 5 \
when a node is not Ready within `timeouts.cluster`, 128 + the signal's number when Ctrl-C, SIGTERM \
or SIGHUP interrupts it (a cluster this run created is then removed).",
        after_help = "Examples:
  devstack cluster up
  devstack cluster up --retain      # keep what a failed create left, to look at it"
    )]
    Up {
        /// Keep a half-created cluster on failure or a signal (Ctrl-C, SIGTERM, SIGHUP), for debugging
        #[arg(long)]
        retain: bool,
        /// Recreate the cluster when it differs from the profile in what cannot change in place (node image or Kubernetes version, K3s's `k3sArgs`, a fixed API server port, `cluster.ports`, Kind's node count)
        #[arg(long)]
        recreate: bool,
    },
    /// Remove the cluster, its volumes and its kubeconfig context
    #[command(
        long_about = "Remove the cluster, its volumes and its kubeconfig context; LocalStack and \
its secrets stay. Exit 0 also when there was nothing to remove, 3 when Docker does not answer.",
        after_help = "Examples:
  devstack cluster down             # LocalStack and its secrets stay"
    )]
    Down,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Images of this machine's Docker image store (`docker images`)
    #[arg(required = true, value_name = "IMAGE")]
    pub images: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SeedArgs {
    /// Generate new values for `generate` secrets
    #[arg(long)]
    pub rotate: bool,
    /// Report what would change without writing
    #[arg(long)]
    pub dry_run: bool,
    /// Concurrent requests to Secrets Manager, from 1 to 64
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Keep a half-created stack on failure or a signal (Ctrl-C, SIGTERM, SIGHUP), for debugging
    #[arg(long)]
    pub retain: bool,
    /// Skip the round trip at the end (default: the profile's `verify.onUp`)
    #[arg(long)]
    pub no_verify: bool,
    /// Recreate the cluster when it differs from the profile in what cannot change in place (node image or Kubernetes version, K3s's `k3sArgs`, a fixed API server port, `cluster.ports`, Kind's node count); LocalStack and its secrets are kept
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
pub struct StartArgs {
    /// Skip the round trip at the end (default: the profile's `verify.onUp`)
    #[arg(long)]
    pub no_verify: bool,
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
    #[command(flatten)]
    pub lines: LogLines,
}

/// Which lines `logs` and `localstack logs` print.
#[derive(Debug, Args)]
pub struct LogLines {
    /// Only the last N lines of each source (default: 200, or every line with --since)
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Keep printing new lines of every source until Ctrl-C, SIGTERM or SIGHUP
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
pub struct FactsArgs {
    /// KEY='value' lines for a shell or `flux envsubst` (sensitive values shown as <sensitive>)
    #[arg(long)]
    pub dotenv: bool,
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
