//! `gitops.apps`: the user's own Kustomizations, checked and put in the
//! order they can become ready in.

use std::collections::{BTreeMap, BTreeSet};

use serde_saphyr::{Location, Spanned};

use super::Resolver;
use crate::profile::duration::HumanDuration;
use crate::profile::schema::{AppSpec, GitopsSourceKind};
use crate::profile::settings::{AppSettings, DEVSTACK_KUSTOMIZATIONS, validate_dns_label};

/// Apps' names become Kustomization names, from which devstack derives
/// others; issue 52 caps them below the 63 of a label to leave room.
pub const MAX_APP_NAME: usize = 40;

const DEFAULT_APP_TIMEOUT: HumanDuration = HumanDuration::secs(300);

/// An accepted app, with where its parts were written.
struct App {
    settings: AppSettings,
    location: Location,
    depends_on: Vec<Spanned<String>>,
}

pub(super) fn resolve(
    r: &mut Resolver,
    specs: Vec<Spanned<AppSpec>>,
    source: GitopsSourceKind,
) -> Vec<AppSettings> {
    let mut apps: Vec<App> = Vec::new();
    for (index, entry) in specs.into_iter().enumerate() {
        if let Some(app) = app(r, index, entry, source, &apps) {
            apps.push(app);
        }
    }
    let names: Vec<String> = apps.iter().map(|a| a.settings.name.clone()).collect();
    for app in &mut apps {
        let mut known = Vec::new();
        for dependency in &app.depends_on {
            if names.contains(&dependency.value) {
                if !known.contains(&dependency.value) {
                    known.push(dependency.value.clone());
                }
                continue;
            }
            let hint = match crate::profile::load::closest_match(&dependency.value, &names) {
                Some(close) => format!("did you mean `{close}`? apps: {}", names.join(", ")),
                None => format!("apps: {}", names.join(", ")),
            };
            r.problems.at(
                &dependency.referenced,
                format!(
                    "app `{}` depends on `{}`, which is no app",
                    app.settings.name, dependency.value
                ),
                Some(hint),
            );
        }
        app.settings.depends_on = known;
    }
    for cycle in cycles(&apps) {
        let first = &apps[cycle[0]];
        let mut path: Vec<&str> = cycle
            .iter()
            .map(|&i| apps[i].settings.name.as_str())
            .collect();
        path.push(&first.settings.name);
        r.problems.at(
            &first.location,
            format!(
                "apps depend on each other in a cycle: {}",
                path.join(" -> ")
            ),
            Some("remove one of the cycle's dependsOn entries".into()),
        );
    }
    ordered(apps.into_iter().map(|a| a.settings).collect())
}

fn app(
    r: &mut Resolver,
    index: usize,
    entry: Spanned<AppSpec>,
    source: GitopsSourceKind,
    earlier: &[App],
) -> Option<App> {
    let location = entry.referenced;
    let spec = entry.value;
    let at = |key: &str| format!("gitops.apps[{index}].{key}");
    let name = &spec.name;
    let mut valid = true;
    if let Err(why) = validate_dns_label(name, MAX_APP_NAME) {
        valid = false;
        r.problems.at_path(
            &at("name"),
            format!("invalid app name `{name}`: {why}"),
            Some("use lowercase letters, digits and '-', e.g. `apps`".into()),
        );
    } else if DEVSTACK_KUSTOMIZATIONS.contains(&name.as_str()) {
        valid = false;
        r.problems.at_path(
            &at("name"),
            format!("app name `{name}` is the name of one of devstack's own Kustomizations"),
            Some(format!(
                "rename the app; devstack's are: {}",
                DEVSTACK_KUSTOMIZATIONS.join(", ")
            )),
        );
    } else if earlier.iter().any(|a| &a.settings.name == name) {
        valid = false;
        r.problems.at(
            &location,
            format!("app `{name}` is declared twice"),
            Some("give each app a unique name".into()),
        );
    }
    if let Some(timeout) = spec.timeout {
        super::refuse_zero(r, &at("timeout"), timeout, "5m");
    }
    let path = match normalize_app_path(&spec.path) {
        Ok(path) => path,
        Err(why) => {
            r.problems.at_path(
                &at("path"),
                format!("app `{name}`: path `{}` {why}", spec.path),
                Some("a directory relative to the profile file (`gitops.source: local`) or inside the repository (`git`), e.g. `apps`".into()),
            );
            return None;
        }
    };
    if source == GitopsSourceKind::Local {
        let dir = r.relative(&path);
        let why = if !dir.exists() {
            Some("does not exist")
        } else if !dir.is_dir() {
            Some("is not a directory")
        } else {
            None
        };
        if let Some(why) = why {
            r.problems.at_path(
                &at("path"),
                format!("app `{name}`: path `{path}` {why} ({})", dir.display()),
                Some(
                    "with `gitops.source: local` an app's path is a directory relative to the profile file"
                        .into(),
                ),
            );
        }
    }
    valid.then(|| App {
        settings: AppSettings {
            name: spec.name,
            path,
            depends_on: Vec::new(),
            wait: spec.wait.unwrap_or(true),
            timeout: spec.timeout.unwrap_or(DEFAULT_APP_TIMEOUT),
        },
        location,
        depends_on: spec.depends_on,
    })
}

/// `./apps/` -> `apps`, the root -> `.`; a path that could leave the
/// directory it is relative to is refused.
pub fn normalize_app_path(path: &str) -> Result<String, String> {
    if path.trim().is_empty() {
        return Err("is empty: use `.` for the root".into());
    }
    if path.starts_with('/') || std::path::Path::new(path).is_absolute() {
        return Err("is absolute: it must be relative".into());
    }
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if parts.contains(&"..") {
        return Err("has a `..` component: it must stay inside its root".into());
    }
    Ok(if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    })
}

/// Every cycle once, as indexes into `apps`, each starting at its app
/// written first.
fn cycles(apps: &[App]) -> Vec<Vec<usize>> {
    let index: BTreeMap<&str, usize> = apps
        .iter()
        .enumerate()
        .map(|(i, a)| (a.settings.name.as_str(), i))
        .collect();
    let edges: Vec<Vec<usize>> = apps
        .iter()
        .map(|a| {
            a.settings
                .depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        node: usize,
        edges: &[Vec<usize>],
        marks: &mut [Mark],
        path: &mut Vec<usize>,
        found: &mut BTreeSet<Vec<usize>>,
    ) {
        marks[node] = Mark::OnPath;
        path.push(node);
        for &next in &edges[node] {
            match marks[next] {
                Mark::New => visit(next, edges, marks, path, found),
                Mark::OnPath => {
                    let start = path.iter().position(|&n| n == next).unwrap_or(0);
                    let mut cycle = path[start..].to_vec();
                    let lowest = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                    cycle.rotate_left(lowest);
                    found.insert(cycle);
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[node] = Mark::Done;
    }
    let mut marks = vec![Mark::New; apps.len()];
    let mut found = BTreeSet::new();
    for node in 0..apps.len() {
        if marks[node] == Mark::New {
            visit(node, &edges, &mut marks, &mut Vec::new(), &mut found);
        }
    }
    found.into_iter().collect()
}

/// Dependencies before their dependents, otherwise profile order: each
/// round takes the first app whose dependencies are all placed. Apps in a
/// cycle (already an error) follow in profile order.
fn ordered(mut pending: Vec<AppSettings>) -> Vec<AppSettings> {
    let mut placed: Vec<AppSettings> = Vec::with_capacity(pending.len());
    while let Some(next) = pending.iter().position(|app| {
        app.depends_on
            .iter()
            .all(|d| placed.iter().any(|p| &p.name == d))
    }) {
        placed.push(pending.remove(next));
    }
    placed.extend(pending);
    placed
}
