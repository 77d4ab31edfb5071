//! How a running cluster differs from the profile: the changes a provider
//! applies in place, and those only a recreate applies.

use serde::Serialize;

use crate::error::Error;
use crate::profile::Settings;

/// One difference between the running cluster and the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `agents 0 -> 1`, `image rancher/k3s:a -> rancher/k3s:b`.
    pub what: String,
    /// The provider applies it to the running cluster; otherwise only
    /// recreating the cluster does.
    pub in_place: bool,
}

/// What `up` would change on the running cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// A cluster of this stack exists (running or not).
    pub exists: bool,
    pub changes: Vec<Change>,
}

impl Plan {
    pub fn needs_recreate(&self) -> bool {
        self.changes.iter().any(|c| !c.in_place)
    }

    /// Whether `up` makes a new cluster: none exists, or `recreate` replaces
    /// the one that does. What such a run leaves on failure is its own to
    /// roll back; a cluster it found is not.
    pub fn creates(&self, recreate: bool) -> bool {
        !self.exists || (recreate && self.needs_recreate())
    }

    /// Refuses, before anything happens, a change only a recreate applies,
    /// unless the caller asked for the recreate.
    pub fn check(&self, recreate: bool, settings: &Settings) -> Result<(), Error> {
        if !self.needs_recreate() || recreate {
            return Ok(());
        }
        let changes: Vec<&str> = self
            .changes
            .iter()
            .filter(|c| !c.in_place)
            .map(|c| c.what.as_str())
            .collect();
        Err(Error::user(format!(
            "the running {} cluster of stack `{}` differs from the profile in what it cannot change in place: {}",
            settings.cluster.provider.as_str(),
            settings.name,
            changes.join(", ")
        ))
        .with_hint(
            "`devstack up --recreate` recreates the cluster (LocalStack and its secrets are kept); or change the profile back",
        ))
    }
}

/// The change of `cluster.ports` when a cluster publishes `have` (port in
/// the node, port on the host) besides its API server. Published ports are
/// fixed when a node container is created, so only a recreate changes them.
pub(crate) fn ports_change(mut have: Vec<(u16, u16)>, settings: &Settings) -> Option<Change> {
    let mut want: Vec<(u16, u16)> = settings
        .cluster
        .ports
        .iter()
        .map(|p| (p.container_port, p.host_port))
        .collect();
    have.sort_unstable();
    have.dedup();
    want.sort_unstable();
    want.dedup();
    let list = |ports: &[(u16, u16)]| {
        ports
            .iter()
            .map(|(inside, host)| format!("{host}:{inside}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    (have != want).then(|| Change {
        what: format!("ports [{}] -> [{}]", list(&have), list(&want)),
        in_place: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_that_need_a_recreate_are_refused() {
        let settings = crate::profile::Settings::builtin(&Default::default()).unwrap();
        let change = |what: &str, in_place| Change {
            what: what.into(),
            in_place,
        };
        let in_place = Plan {
            exists: true,
            changes: vec![change("agents 0 -> 1", true)],
        };
        assert!(in_place.check(false, &settings).is_ok());
        let image = Plan {
            exists: true,
            changes: vec![change("agents 0 -> 1", true), change("image a -> b", false)],
        };
        let err = image.check(false, &settings).unwrap_err();
        assert_eq!(err.kind(), crate::error::Kind::User);
        assert!(
            err.message().ends_with(": image a -> b"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("`devstack up --recreate`"));
        assert!(image.check(true, &settings).is_ok());
    }
}
