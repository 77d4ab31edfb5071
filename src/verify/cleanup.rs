//! The removal of every probe object a round trip may have created,
//! whatever happened: in the cluster, in Secrets Manager and in SSM.

use super::checks::RoundTrip;
use super::probe::{LATE_WRITE_WINDOW, bounded, delete_object, remove_late_writes};

impl RoundTrip<'_> {
    /// Removes every probe object that may exist; returns what failed.
    pub(super) async fn cleanup(&self) -> Vec<String> {
        let p = &self.probe;
        let ns = &p.namespace;
        let delete_remote = |name: String| async move {
            match self
                .sm
                .delete_secret()
                .secret_id(&name)
                .force_delete_without_recovery(true)
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    Ok(())
                }
                Err(e) => Err(self.aws_reason(&format!("delete secret `{name}`"), &e)),
            }
        };
        let mut warnings = Vec::new();
        // The ExternalSecret goes first so ESO does not recreate its Secret;
        // the PushSecret before its remote secret so ESO does not push again.
        if self.touched.external_secret {
            let what = format!("ExternalSecret {ns}/{}", p.object);
            let request = delete_object(self.external_secrets(ns), p.object.clone());
            warnings.extend(bounded(what, request).await);
            let what = format!("Secret {ns}/{}", p.object);
            let request = delete_object(self.secrets(), p.object.clone());
            warnings.extend(bounded(what.clone(), request).await);
            // Interrupted, the round trip did not wait for ESO's reconcile of
            // the probe: one still in flight can write the Secret after both
            // removals above, within moments or not at all.
            if self.interrupted {
                let request =
                    remove_late_writes(self.secrets(), p.object.clone(), LATE_WRITE_WINDOW);
                warnings.extend(bounded(what, request).await);
            }
        }
        if self.touched.push_secret {
            let what = format!("PushSecret {ns}/{}", p.push_object);
            let request = delete_object(self.push_secrets(), p.push_object.clone());
            warnings.extend(bounded(what, request).await);
        }
        if self.touched.push_source {
            let what = format!("Secret {ns}/{}", p.push_object);
            let request = delete_object(self.secrets(), p.push_object.clone());
            warnings.extend(bounded(what, request).await);
        }
        if self.touched.remote {
            let what = format!("LocalStack secret `{}`", p.remote);
            warnings.extend(bounded(what, delete_remote(p.remote.clone())).await);
        }
        if self.touched.push_secret {
            let what = format!("LocalStack secret `{}`", p.push_remote);
            warnings.extend(bounded(what, delete_remote(p.push_remote.clone())).await);
        }
        if self.touched.parameter_external_secret {
            let what = format!("ExternalSecret {ns}/{}", p.parameter_object);
            let request = delete_object(self.external_secrets(ns), p.parameter_object.clone());
            warnings.extend(bounded(what, request).await);
            let what = format!("Secret {ns}/{}", p.parameter_object);
            let request = delete_object(self.secrets(), p.parameter_object.clone());
            warnings.extend(bounded(what.clone(), request).await);
            if self.interrupted {
                let request = remove_late_writes(
                    self.secrets(),
                    p.parameter_object.clone(),
                    LATE_WRITE_WINDOW,
                );
                warnings.extend(bounded(what, request).await);
            }
        }
        if let (true, Some(ssm)) = (self.touched.parameter, &self.ssm) {
            let what = format!("LocalStack parameter `{}`", p.parameter);
            let request = async {
                match ssm.delete_parameter().name(&p.parameter).send().await {
                    Ok(_) => Ok(()),
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|s| s.is_parameter_not_found()) =>
                    {
                        Ok(())
                    }
                    Err(e) => {
                        Err(self.aws_reason(&format!("delete parameter `{}`", p.parameter), &e))
                    }
                }
            };
            warnings.extend(bounded(what, request).await);
        }
        warnings.iter().map(|w| p.scrub(w)).collect()
    }
}
