//! The probe of one round trip: its random names and values, the objects
//! that carry them, the scrubbing of its values from any text, and the
//! bounded removal of what it created.

use std::time::Duration;

use base64::Engine;
use kube::api::{Api, DeleteParams};
use rand::Rng;
use serde_json::{Value, json};

use super::{ESO_GROUP, ESO_VERSION, FORCE_SYNC_ANNOTATION, PROBE_PREFIX, PUSH_SECRET_VERSION};
use crate::k8s::{Budget, Verdict, Wait};
use crate::profile::SecretString;
use crate::profile::schema::{Charset, GenerateSpec};
use crate::ui::format_duration;

pub(super) const VALUE_KEY: &str = "value";
/// Bound of each cleanup request (cleanup runs even after the deadline).
const CLEANUP_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "devstack");
pub(super) const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "verify-probe");

/// Names and values of one run. The values never leave this struct except
/// to be sent, and every text produced during the run is scrubbed of them.
pub(super) struct Probe {
    pub(super) id: String,
    pub(super) namespace: String,
    /// The stack's ClusterSecretStore, which the probe reads through.
    pub(super) store: String,
    /// LocalStack secret the ExternalSecret reads.
    pub(super) remote: String,
    /// LocalStack secret the PushSecret writes.
    pub(super) push_remote: String,
    /// ExternalSecret and its target Secret.
    pub(super) object: String,
    /// PushSecret and its source Secret.
    pub(super) push_object: String,
    /// The Parameter Store's round trip: the parameter in LocalStack, and
    /// the ExternalSecret (and Secret) that reads it through `parameter_store`.
    pub(super) parameter: String,
    pub(super) parameter_object: String,
    pub(super) parameter_store: String,
    pub(super) initial: SecretString,
    pub(super) rotated: SecretString,
    pub(super) pushed: SecretString,
}

impl Probe {
    /// A probe of the Secrets Manager round trip alone.
    #[cfg(test)]
    pub(super) fn new(namespace: &str, store: &str) -> Self {
        Self::with_parameter_store(namespace, store, "")
    }

    /// A probe that also reads a parameter through `parameter_store`.
    pub(super) fn with_parameter_store(
        namespace: &str,
        store: &str,
        parameter_store: &str,
    ) -> Self {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::rng();
        let id: String = (0..10)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        let value = || {
            crate::seed::generate(&GenerateSpec {
                length: 32,
                charset: Charset::Alphanumeric,
            })
        };
        Probe {
            remote: format!("{PROBE_PREFIX}/{id}"),
            push_remote: format!("{PROBE_PREFIX}/{id}-push"),
            object: format!("{PROBE_PREFIX}-{id}"),
            push_object: format!("{PROBE_PREFIX}-{id}-push"),
            parameter: format!("/{PROBE_PREFIX}/{id}"),
            parameter_object: format!("{PROBE_PREFIX}-{id}-parameter"),
            parameter_store: parameter_store.to_string(),
            namespace: namespace.to_string(),
            store: store.to_string(),
            initial: value(),
            rotated: value(),
            pushed: value(),
            id,
        }
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        scrub(text, &[&self.initial, &self.rotated, &self.pushed])
    }
}

/// `text` with every occurrence of a secret value, plain or base64 (as a
/// Secret's `data` carries it), masked.
fn scrub(text: &str, values: &[&SecretString]) -> String {
    let mut out = text.to_string();
    for value in values.iter().filter(|v| !v.is_empty()) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value.expose());
        for form in [value.expose(), encoded.as_str()] {
            out = out.replace(form, crate::profile::secret::MASK);
        }
    }
    out
}

fn probe_labels() -> Value {
    json!({MANAGED_BY.0: MANAGED_BY.1, COMPONENT.0: COMPONENT.1})
}

/// What a probe ExternalSecret reads, through which store, into which Secret.
pub(super) struct Target<'a> {
    pub(super) store: &'a str,
    pub(super) remote: &'a str,
    pub(super) object: &'a str,
}

impl Probe {
    /// The Secrets Manager round trip's.
    pub(super) fn secrets_manager(&self) -> Target<'_> {
        Target {
            store: &self.store,
            remote: &self.remote,
            object: &self.object,
        }
    }

    /// The Parameter Store round trip's.
    pub(super) fn parameter_store(&self) -> Target<'_> {
        Target {
            store: &self.parameter_store,
            remote: &self.parameter,
            object: &self.parameter_object,
        }
    }
}

/// The probe ExternalSecret, with a `force-sync` annotation when given.
pub(super) fn probe_external_secret(p: &Probe, force_sync: Option<&str>) -> Value {
    probe_external_secret_for(p, &p.secrets_manager(), force_sync)
}

/// The ExternalSecret of a round trip's `target`.
pub(super) fn probe_external_secret_for(
    p: &Probe,
    target: &Target,
    force_sync: Option<&str>,
) -> Value {
    let mut metadata = json!({
        "name": target.object, "namespace": p.namespace, "labels": probe_labels(),
    });
    if let Some(stamp) = force_sync {
        metadata["annotations"] = json!({FORCE_SYNC_ANNOTATION: stamp});
    }
    json!({
        "apiVersion": format!("{ESO_GROUP}/{ESO_VERSION}"),
        "kind": "ExternalSecret",
        "metadata": metadata,
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRef": {"name": target.store, "kind": "ClusterSecretStore"},
            "target": {"name": target.object, "creationPolicy": "Owner"},
            "data": [{"secretKey": VALUE_KEY, "remoteRef": {"key": target.remote}}],
        },
    })
}

/// The Secret holding the value to push, and the PushSecret that pushes it
/// to a new LocalStack secret (ESO creates it, tagged as its own).
pub(super) fn probe_push_objects(p: &Probe) -> (Value, Value) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(p.pushed.expose());
    let source = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": p.push_object, "namespace": p.namespace, "labels": probe_labels()},
        "type": "Opaque",
        "data": {VALUE_KEY: encoded},
    });
    let push = json!({
        "apiVersion": format!("{ESO_GROUP}/{PUSH_SECRET_VERSION}"),
        "kind": "PushSecret",
        "metadata": {"name": p.push_object, "namespace": p.namespace, "labels": probe_labels()},
        "spec": {
            "refreshInterval": "1h",
            "updatePolicy": "Replace",
            // devstack removes the remote secret itself: no finalizer that
            // could hang the cleanup when ESO is down.
            "deletionPolicy": "None",
            "secretStoreRefs": [{"name": p.store, "kind": "ClusterSecretStore"}],
            "selector": {"secret": {"name": p.push_object}},
            "data": [{"match": {"secretKey": VALUE_KEY, "remoteRef": {"remoteKey": p.push_remote}}}],
        },
    });
    (source, push)
}

/// Runs one cleanup request within its bound; `Some(warning)` on failure.
pub(super) async fn bounded(
    what: String,
    request: impl std::future::Future<Output = Result<(), String>>,
) -> Option<String> {
    match tokio::time::timeout(CLEANUP_REQUEST_TIMEOUT, request).await {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(format!("could not remove {what}: {why}")),
        Err(_) => Some(format!(
            "could not remove {what}: not done within {}",
            format_duration(CLEANUP_REQUEST_TIMEOUT)
        )),
    }
}

/// Deletes an object and returns once it is gone: an accepted delete is not
/// yet a removal (a finalizer, or a controller still holding it, keeps it
/// listed), and a caller told "removed" must not find it right after. An
/// object written again after the delete (listed, not being deleted) is
/// deleted again rather than waited on: it would never go by itself.
/// The caller bounds the whole of it.
pub(super) async fn delete_object<K>(api: Api<K>, name: String) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    loop {
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        let budget = Budget::new(CLEANUP_REQUEST_TIMEOUT, "timeouts.verify");
        let left = Wait::new(name.clone(), "gone", budget)
            .object(api.clone(), &name, |object| match object {
                None => Verdict::Done,
                Some(o) if kube::Resource::meta(o).deletion_timestamp.is_none() => Verdict::Done,
                Some(_) => Verdict::Waiting("still listed".into()),
            })
            .await
            .map_err(|e| e.message().to_string())?;
        if left.is_none() {
            return Ok(());
        }
        tracing::debug!("{name} is listed again after its delete; deleting it again");
    }
}

/// How long an interrupted round trip's cleanup watches for a probe Secret
/// written again after its removal.
pub(super) const LATE_WRITE_WINDOW: Duration = Duration::from_secs(2);

/// For `window`, removes object `name` each time it appears again.
pub(super) async fn remove_late_writes<K>(
    api: Api<K>,
    name: String,
    window: Duration,
) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let until = tokio::time::Instant::now() + window;
    loop {
        let budget = Budget::new(CLEANUP_REQUEST_TIMEOUT, "timeouts.verify");
        let wait = Wait::new(name.clone(), "written again", budget);
        let appeared = wait.object(api.clone(), &name, |object| match object {
            Some(_) => Verdict::Done,
            None => Verdict::Waiting("absent".into()),
        });
        match tokio::time::timeout_at(until, appeared).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) => return Err(e.message().to_string()),
            Ok(Ok(_)) => {
                tracing::debug!("{name} was written again after its removal; removing it");
                delete_object(api.clone(), name.clone()).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::settings::kube_name;

    #[test]
    fn probe_names_are_valid_and_values_distinct() {
        let p = Probe::new("devstack-verify", "localstack");
        assert_eq!(p.id.len(), 10);
        assert!(p.object.starts_with("devstack-verify-"));
        assert_eq!(kube_name(&p.object), p.object);
        assert_eq!(kube_name(&p.push_object), p.push_object);
        assert!(p.remote.starts_with("devstack-verify/"));
        crate::profile::settings::validate_secret_name(&p.push_remote).unwrap();
        assert_ne!(p.initial, p.rotated);
        assert_ne!(p.rotated, p.pushed);
        assert_eq!(p.initial.expose().len(), 32);
    }

    #[test]
    fn scrub_masks_every_probe_value() {
        let p = Probe::new("ns", "localstack");
        let text = format!(
            "saw {} then {} and {}",
            p.initial.expose(),
            p.rotated.expose(),
            p.pushed.expose()
        );
        let clean = p.scrub(&text);
        assert_eq!(clean, "saw ******** then ******** and ********");
        let (source, _) = probe_push_objects(&p);
        let clean = p.scrub(&format!("rejected: {source}"));
        assert!(!clean.contains(source["data"][VALUE_KEY].as_str().unwrap()));
        assert!(clean.contains("********"));
    }

    #[test]
    fn probe_objects_reference_the_store_and_carry_no_plain_value() {
        let p = Probe::new("verify-ns", "localstack");
        let es = probe_external_secret(&p, None);
        assert_eq!(es["apiVersion"], "external-secrets.io/v1");
        assert_eq!(es["metadata"]["namespace"], "verify-ns");
        assert!(es["metadata"].get("annotations").is_none());
        assert_eq!(es["spec"]["secretStoreRef"]["kind"], "ClusterSecretStore");
        assert_eq!(es["spec"]["secretStoreRef"]["name"], "localstack");
        assert_eq!(es["spec"]["target"]["name"], p.object.as_str());
        assert_eq!(es["spec"]["data"][0]["remoteRef"]["key"], p.remote.as_str());
        let forced = probe_external_secret(&p, Some("123"));
        assert_eq!(forced["metadata"]["annotations"]["force-sync"], "123");

        let (source, push) = probe_push_objects(&p);
        assert_eq!(push["apiVersion"], "external-secrets.io/v1alpha1");
        assert_eq!(
            push["spec"]["selector"]["secret"]["name"],
            p.push_object.as_str()
        );
        assert_eq!(
            push["spec"]["secretStoreRefs"][0]["kind"],
            "ClusterSecretStore"
        );
        let matched = &push["spec"]["data"][0]["match"];
        assert_eq!(matched["secretKey"], VALUE_KEY);
        assert_eq!(matched["remoteRef"]["remoteKey"], p.push_remote.as_str());
        let encoded = source["data"][VALUE_KEY].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(decoded, p.pushed.expose().as_bytes());
        for object in [&es, &forced, &source, &push] {
            let text = object.to_string();
            for value in [&p.initial, &p.rotated, &p.pushed] {
                assert!(!text.contains(value.expose()), "{text}");
            }
        }
    }
}
