//! Resolution: the loaded profile with defaults filled in and overrides
//! applied, in the order flag > environment variable > profile > built-in
//! default, one resolver per section of the profile.

mod apps;
mod cluster;
mod facts;
mod gitops;
mod images;
mod localstack;
mod parameters;
mod registry;
mod secrets;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

pub use apps::{MAX_APP_NAME, normalize_app_path};
pub use gitops::renamed_or_dropped_eso_workloads;
pub use images::parse_mirror_list;

use super::duration::HumanDuration;
use super::load::{
    LoadedProfile, Position, ProfileError, ProfileErrors, Provenance, position_of, position_of_path,
};
use super::schema::{API_VERSION_V1ALPHA1, KIND_PROFILE, TimeoutsSpec, VerifySpec};
use super::settings::{
    BUILTIN_PROFILE_NAME, Origin, Overrides, Settings, Timeouts, VerifySettings, validate_dns_label,
};
use crate::envvars;
use crate::error::Error;

impl Settings {
    /// Settings when no profile is given at all: a Kind stack, because Kind
    /// runs the current Kubernetes; the provider is not pinned, so `up`
    /// falls back to K3s (nothing but Docker) where no kind CLI is found.
    pub fn builtin(overrides: &Overrides) -> Result<Settings, Error> {
        let text = format!(
            "apiVersion: {API_VERSION_V1ALPHA1}\nkind: {KIND_PROFILE}\nname: {BUILTIN_PROFILE_NAME}\n"
        );
        let mut loaded = super::load::parse("<built-in default>", &text, PathBuf::from("."))
            .map_err(ProfileErrors::into_error)?;
        loaded.provenance = Provenance::BuiltIn;
        Settings::resolve(loaded, overrides)
    }

    pub fn resolve(loaded: LoadedProfile, overrides: &Overrides) -> Result<Settings, Error> {
        resolve_with_env(loaded, overrides, &|name| envvars::get(name))
    }
}

type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Resolves every setting. Errors in the profile do not stop resolution: it
/// goes on with a stand-in value so that the later ones are found too, and
/// fails at the end with all of them. Errors in flags and environment
/// variables fail at once, being about this run rather than the file.
pub(crate) fn resolve_with_env(
    loaded: LoadedProfile,
    overrides: &Overrides,
    env: EnvLookup,
) -> Result<Settings, Error> {
    let spec = loaded.spec;
    let mut r = Resolver {
        overrides,
        env,
        base_dir: &loaded.base_dir,
        provenance: &loaded.provenance,
        origins: BTreeMap::new(),
        notices: Vec::new(),
        problems: Problems {
            origin: &loaded.origin,
            text: &loaded.text,
            errors: loaded.structural_errors,
        },
    };
    let name = stack_name(&mut r, &spec.name)?;
    let mut cluster = cluster::resolve(&mut r, spec.cluster)?;
    let services_given = spec
        .localstack
        .as_ref()
        .is_some_and(|l| l.services.is_some());
    let mut localstack = localstack::resolve(&mut r, spec.localstack, cluster.provider)?;
    let registry = registry::resolve(&mut r, spec.registry, &cluster, &localstack);
    let flux = gitops::resolve_flux(&mut r, spec.flux);
    let eso = gitops::resolve_eso(&mut r, spec.eso, cluster.provider);
    let gitops = gitops::resolve_gitops(&mut r, spec.gitops, &eso);
    let images = images::resolve(&mut r, spec.images, &mut cluster);
    let secrets = secrets::resolve(&mut r, spec.secrets);
    let parameters = parameters::resolve(&mut r, spec.parameters, &secrets);
    parameters::require_services(&mut r, &mut localstack, services_given, &parameters, &eso);
    let facts = facts::resolve(&mut r, spec.facts);
    let verify = verify(&mut r, spec.verify);
    let timeouts = timeouts(&mut r, spec.timeouts);

    r.problems.finish()?;
    Ok(Settings {
        name,
        profile: loaded.origin.clone(),
        profile_reference: None,
        base_dir: loaded.base_dir.clone(),
        state_dir: state_dir(env),
        user_kubeconfig: user_kubeconfig(env),
        cluster,
        localstack,
        registry,
        flux,
        eso,
        gitops,
        images,
        secrets,
        parameters,
        facts,
        verify,
        timeouts,
        names: Default::default(),
        origins: r.origins,
        notices: r.notices,
    })
}

/// What every section's resolver reads, and the origins and problems they add to.
struct Resolver<'a> {
    overrides: &'a Overrides,
    env: EnvLookup<'a>,
    /// Directory the profile's relative paths resolve against.
    base_dir: &'a Path,
    provenance: &'a Provenance,
    origins: BTreeMap<String, Origin>,
    /// What the run sets aside of the profile, told to the user.
    notices: Vec<String>,
    problems: Problems<'a>,
}

impl Resolver<'_> {
    fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// A variable's value read as its flag reads it; `forms` names the
    /// valid ones, as the flag's error does.
    fn env_parsed<T: std::str::FromStr>(
        &self,
        name: &str,
        forms: &str,
    ) -> Result<Option<T>, Error> {
        match self.env(name) {
            None => Ok(None),
            Some(raw) => raw.parse().map(Some).map_err(|_| {
                Error::user(format!(
                    "environment variable {name} has an invalid value `{raw}`"
                ))
                .with_hint(format!("use {forms}, or unset {name}"))
            }),
        }
    }

    /// One overridable value, with its origin recorded under `key`.
    fn pick<T>(
        &mut self,
        key: &str,
        flag: Option<T>,
        env: Option<T>,
        profile: Option<T>,
        default: T,
    ) -> T {
        let (value, origin) = if let Some(v) = flag {
            (v, Origin::Flag)
        } else if let Some(v) = env {
            (v, Origin::Env)
        } else if let Some(v) = profile {
            // The built-in default's few keys are defaults, not a profile's.
            let origin = match self.provenance {
                Provenance::BuiltIn => Origin::Default,
                Provenance::File | Provenance::Shipped(_) => Origin::Profile,
            };
            (v, origin)
        } else {
            (default, Origin::Default)
        };
        self.origins.insert(key.to_string(), origin);
        value
    }

    fn relative(&self, p: &str) -> PathBuf {
        let path = Path::new(p);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }

    /// A path from the profile as errors name it: like the profile's own
    /// origin, relative to where devstack runs, without a `./` to read past.
    fn shown(&self, p: &str) -> String {
        if self.base_dir == Path::new(".") {
            p.to_string()
        } else {
            self.relative(p).display().to_string()
        }
    }
}

/// A profile's errors, collected so that one run reports all of them.
struct Problems<'a> {
    origin: &'a str,
    /// The text the spec was read from, to find positions in.
    text: &'a str,
    errors: Vec<ProfileError>,
}

impl Problems<'_> {
    fn at(&mut self, location: &serde_saphyr::Location, message: String, hint: Option<String>) {
        self.push(Some(position_of(location)), message, hint);
    }

    /// An error about the node at a dotted path such as `cluster.ports[1].protocol`.
    fn at_path(&mut self, path: &str, message: String, hint: Option<String>) {
        self.push(position_of_path(self.text, path), message, hint);
    }

    fn push(&mut self, position: Option<Position>, message: String, hint: Option<String>) {
        let origin = self.origin.to_string();
        self.in_file(origin, position, message, hint);
    }

    /// An error in a file the profile reads (a dotenv file), at its own position.
    fn in_file(
        &mut self,
        origin: String,
        position: Option<Position>,
        message: String,
        hint: Option<String>,
    ) {
        self.errors.push(ProfileError {
            origin,
            position,
            message,
            hint,
        });
    }

    fn finish(mut self) -> Result<(), Error> {
        if self.errors.is_empty() {
            return Ok(());
        }
        // The profile's own errors first, so the report is headed by the profile.
        let origin = self.origin;
        self.errors.sort_by_key(|e| e.origin != origin);
        Err(ProfileErrors(self.errors).into_error())
    }
}

const BIND_ADDRESS_HINT: &str = "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)";

const NAME_HINT: &str =
    "use 1-32 lowercase letters, digits and '-', starting with a letter (e.g. `dev`)";

/// The stack name; an invalid one from a flag or the environment fails at once.
fn stack_name(r: &mut Resolver, in_profile: &Spanned<String>) -> Result<String, Error> {
    let name = r.pick(
        "name",
        r.overrides.name.clone(),
        r.env(envvars::DEVSTACK_NAME),
        Some(in_profile.value.clone()),
        String::new(),
    );
    if let Err(why) = validate_stack_name(&name) {
        match r.origins["name"] {
            Origin::Profile => r
                .problems
                .at(&in_profile.referenced, why, Some(NAME_HINT.into())),
            _ => {
                return Err(
                    Error::user(format!("invalid stack name `{name}`: {why}")).with_hint(NAME_HINT)
                );
            }
        }
    }
    Ok(name)
}

pub fn validate_stack_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 32 {
        return Err("must be 1 to 32 characters".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("must start with a lowercase letter".into());
    }
    if name.ends_with('-') {
        return Err("must not end with '-'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(format!("character `{bad}` is not allowed"));
    }
    Ok(())
}

fn verify(r: &mut Resolver, spec: Option<VerifySpec>) -> VerifySettings {
    let namespace = spec
        .as_ref()
        .and_then(|v| v.namespace.clone())
        .unwrap_or_else(|| "devstack-verify".into());
    if let Err(why) = validate_dns_label(&namespace, 63) {
        r.problems.at_path(
            "verify.namespace",
            format!("`verify.namespace` `{namespace}` is no namespace name: {why}"),
            Some(NAMESPACE_HINT.into()),
        );
    }
    VerifySettings {
        on_up: spec.as_ref().and_then(|v| v.on_up).unwrap_or(true),
        namespace,
        push_secret: spec.as_ref().and_then(|v| v.push_secret).unwrap_or(false),
    }
}

/// A namespace is an RFC 1123 label.
const NAMESPACE_HINT: &str = "a namespace has 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. `team-a`";

/// A duration of zero, which no step or reconcile can be given: refused at `key`.
fn refuse_zero(r: &mut Resolver, key: &str, value: HumanDuration, default: &str) {
    if value.get().is_zero() {
        r.problems.at_path(
            key,
            format!("`{key}` is zero, which leaves no time at all"),
            Some(format!(
                "give a duration such as `90s` or `5m`, or remove `{key}` for the default ({default})"
            )),
        );
    }
}

fn timeouts(r: &mut Resolver, spec: Option<TimeoutsSpec>) -> Timeouts {
    let t = spec.unwrap_or_default();
    let d = Timeouts::default();
    for (key, given, default) in [
        ("preflight", t.preflight, d.preflight),
        ("localstack", t.localstack, d.localstack),
        ("cluster", t.cluster, d.cluster),
        ("preload", t.preload, d.preload),
        ("flux", t.flux, d.flux),
        ("eso", t.eso, d.eso),
        ("seed", t.seed, d.seed),
        ("verify", t.verify, d.verify),
    ] {
        if let Some(given) = given {
            refuse_zero(r, &format!("timeouts.{key}"), given, &default.to_string());
        }
    }
    Timeouts {
        preflight: t.preflight.unwrap_or(d.preflight),
        localstack: t.localstack.unwrap_or(d.localstack),
        cluster: t.cluster.unwrap_or(d.cluster),
        preload: t.preload.unwrap_or(d.preload),
        flux: t.flux.unwrap_or(d.flux),
        eso: t.eso.unwrap_or(d.eso),
        seed: t.seed.unwrap_or(d.seed),
        verify: t.verify.unwrap_or(d.verify),
    }
}

/// The state directory as every run resolves it, for commands that need it
/// without a profile (`devstack list`): it comes from the environment
/// alone, never from a profile.
pub fn state_dir_from_env() -> PathBuf {
    state_dir(&|name| envvars::get(name))
}

fn state_dir(env: EnvLookup) -> PathBuf {
    if let Some(dir) = env(envvars::DEVSTACK_HOME) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env(envvars::XDG_STATE_HOME) {
        return PathBuf::from(dir).join("devstack");
    }
    let home = env(envvars::HOME).unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/devstack")
}

fn user_kubeconfig(env: EnvLookup) -> PathBuf {
    if let Some(list) = env(envvars::KUBECONFIG)
        && let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty())
    {
        return first;
    }
    let home = env(envvars::HOME).unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".kube/config")
}
