//! Which provider a run uses when the profile does not pin one: the
//! provider the stack's cluster was made with, else Kind (the default) when
//! a usable kind CLI is found, else K3s, which needs nothing but Docker.
//! The decision is a pure function; [`settle`] gathers its inputs.

use std::sync::Arc;

use serde::Serialize;

use crate::docker::Engine;
use crate::error::Error;
use crate::profile::{Provider, Settings};

/// What decided the provider, for the line `up` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// A flag, an environment variable or the profile named it.
    Pinned,
    /// The stack's cluster was made with it (its recorded provider).
    Recorded,
    /// The default (Kind), with a usable kind CLI.
    Default,
    /// The default needs kind and none is usable: K3s instead. Carries why.
    KindMissing(String),
    /// A snapshot restores into the provider its cluster was made with.
    Snapshot,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub provider: Provider,
    pub reason: Reason,
}

impl Choice {
    /// The line to print before anything else, when the user should know.
    pub fn notice(&self) -> Option<String> {
        match &self.reason {
            Reason::KindMissing(why) => Some(format!(
                "using K3s instead of Kind, the default provider: {why}\n  hint: install kind \
                 (https://kind.sigs.k8s.io/docs/user/quick-start/#installation) or set DEVSTACK_KIND \
                 to use Kind; `--provider k3s` (or `cluster.provider: k3s`) chooses K3s without this notice"
            )),
            Reason::Recorded if self.provider != Provider::Kind => Some(format!(
                "keeping provider {}: the stack's cluster was made with it",
                self.provider.as_str()
            )),
            _ => None,
        }
    }
}

/// The decision. `pinned`: the provider a flag, environment variable or
/// the profile names; `recorded`: the provider of the stack's cluster, when
/// it has one; `kind`: whether a usable kind CLI was found (`Err` = why not).
pub fn decide(
    pinned: Option<Provider>,
    recorded: Option<Provider>,
    kind: Result<(), String>,
) -> Choice {
    if let Some(provider) = pinned {
        return Choice {
            provider,
            reason: Reason::Pinned,
        };
    }
    // A stack keeps its cluster's provider: switching would orphan the
    // running cluster and every secret synced into it.
    if let Some(provider) = recorded {
        return Choice {
            provider,
            reason: Reason::Recorded,
        };
    }
    match kind {
        Ok(()) => Choice {
            provider: Provider::Kind,
            reason: Reason::Default,
        },
        Err(why) => Choice {
            provider: Provider::K3s,
            reason: Reason::KindMissing(why),
        },
    }
}

/// The provider of the stack's cluster: `recorded`, the one its record
/// names, else the one whose cluster runs (a stack made before the record
/// kept its provider).
async fn provider_of_stack(
    docker: &Arc<dyn Engine>,
    settings: &Settings,
    recorded: Option<Provider>,
) -> Result<Option<Provider>, Error> {
    if recorded.is_some() {
        return Ok(recorded);
    }
    super::found_provider(docker, settings).await
}

/// `settings` on the provider [`decide`] picks, and the choice, where
/// `recorded` is the provider the stack's record names. A pinned provider
/// is returned as it is, without looking for kind or clusters.
pub async fn settle(
    docker: &Arc<dyn Engine>,
    settings: &Settings,
    recorded: Option<Provider>,
) -> Result<(Settings, Choice), Error> {
    settle_with(docker, settings, recorded, async {
        super::kind::find_kind(settings)
            .await
            .map(|_| ())
            .map_err(|e| e.message().to_string())
    })
    .await
}

/// What [`settle`] would pick, found without fetching kind or writing
/// anything (`doctor`): kind installed, else its pinned download answering.
pub async fn predict(
    docker: &Arc<dyn Engine>,
    settings: &Settings,
    recorded: Option<Provider>,
) -> Result<(Settings, Choice), Error> {
    settle_with(docker, settings, recorded, async {
        match super::kind::find_installed_kind(settings).await {
            Ok(_) => Ok(()),
            Err(missing) if crate::envvars::is_set(crate::envvars::DEVSTACK_KIND) => {
                Err(missing.message().to_string())
            }
            Err(missing) => crate::artifacts::kind_reachable(settings)
                .await
                .map(|_| ())
                .map_err(|why| format!("{}, and it cannot be fetched: {why}", missing.message())),
        }
    })
    .await
}

async fn settle_with(
    docker: &Arc<dyn Engine>,
    settings: &Settings,
    recorded: Option<Provider>,
    kind: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(Settings, Choice), Error> {
    if settings.provider_pinned() {
        let choice = decide(Some(settings.cluster.provider), None, Ok(()));
        return Ok((settings.clone(), choice));
    }
    let recorded = provider_of_stack(docker, settings, recorded).await?;
    let kind = if recorded.is_some() {
        Ok(())
    } else {
        kind.await
    };
    let choice = decide(None, recorded, kind);
    Ok((settings.with_provider(choice.provider)?, choice))
}

/// `settings` for a restore from a snapshot: the provider the snapshot's
/// cluster was made with (`saved`; K3s when it does not say) unless pinned
/// (a pinned provider the snapshot does not hold is refused by the restore
/// itself, naming the fix).
pub fn settle_for_restore(
    settings: &Settings,
    saved: Option<Provider>,
) -> Result<(Settings, Choice), Error> {
    if settings.provider_pinned() {
        let choice = decide(Some(settings.cluster.provider), None, Ok(()));
        return Ok((settings.clone(), choice));
    }
    let provider = saved.unwrap_or(Provider::K3s);
    let choice = Choice {
        provider,
        reason: Reason::Snapshot,
    };
    Ok((settings.with_provider(provider)?, choice))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_provider_wins_over_everything() {
        for pinned in [Provider::K3s, Provider::Kind] {
            for recorded in [None, Some(Provider::K3s), Some(Provider::Kind)] {
                for kind in [Ok(()), Err("no kind".to_string())] {
                    let choice = decide(Some(pinned), recorded, kind);
                    assert_eq!(choice.provider, pinned);
                    assert_eq!(choice.reason, Reason::Pinned);
                    assert_eq!(choice.notice(), None);
                }
            }
        }
    }

    #[test]
    fn a_stack_keeps_its_recorded_provider() {
        let choice = decide(None, Some(Provider::K3s), Ok(()));
        assert_eq!(
            (choice.provider, &choice.reason),
            (Provider::K3s, &Reason::Recorded)
        );
        assert!(choice.notice().unwrap().contains("keeping provider k3s"));
        let choice = decide(None, Some(Provider::Kind), Err("gone".into()));
        assert_eq!(choice.provider, Provider::Kind);
        assert_eq!(choice.notice(), None, "Kind is the default: nothing to say");
    }

    #[test]
    fn kind_is_the_default_and_k3s_the_fallback() {
        let choice = decide(None, None, Ok(()));
        assert_eq!(
            (choice.provider, &choice.reason),
            (Provider::Kind, &Reason::Default)
        );
        assert_eq!(choice.notice(), None);

        let choice = decide(None, None, Err("`kind` not found on PATH".into()));
        assert_eq!(choice.provider, Provider::K3s);
        let notice = choice.notice().unwrap();
        assert!(
            notice.starts_with("using K3s instead of Kind, the default provider: `kind` not found"),
            "{notice}"
        );
        assert!(notice.contains("hint: install kind"), "{notice}");
    }
}
