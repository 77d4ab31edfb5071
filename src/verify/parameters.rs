//! The round trip through the Parameter Store's store (a profile with
//! `parameters`): the probe parameter written and rotated in LocalStack's
//! SSM, read into the cluster by an ExternalSecret, its Secret recreated.

use kube::api::DeleteParams;
use tokio::time::Instant;

use super::checks::{Fail, Outcome, RoundTrip, force_sync_stamp};
use super::probe::{COMPONENT, probe_external_secret_for};
use crate::profile::SecretString;

impl RoundTrip<'_> {
    /// The probe parameter written (`overwrite` for the rotation): a
    /// SecureString, the type that holds secrets.
    async fn put_parameter(&self, value: &SecretString, overwrite: bool) -> Result<(), Fail> {
        let ssm = self
            .ssm
            .as_ref()
            .expect("parameter checks run with a client");
        let name = &self.probe.parameter;
        let mut put = ssm
            .put_parameter()
            .name(name)
            .value(value.expose())
            .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
            .overwrite(overwrite);
        if !overwrite {
            // SSM takes tags only when it creates the parameter.
            put = put.description("devstack verify probe; removed when verify ends");
            for (key, value) in [
                (
                    crate::docker::LABEL_MANAGED_BY,
                    crate::docker::MANAGED_BY_VALUE,
                ),
                (crate::docker::LABEL_STACK, self.settings.name.as_str()),
                (crate::docker::LABEL_ROLE, COMPONENT.1),
            ] {
                if let Ok(tag) = aws_sdk_ssm::types::Tag::builder()
                    .key(key)
                    .value(value)
                    .build()
                {
                    put = put.tags(tag);
                }
            }
        }
        put.send().await.map(|_| ()).map_err(|e| {
            let what = if overwrite { "rotate" } else { "create" };
            Fail::Reason(self.aws_reason(&format!("{what} parameter `{name}`"), &e))
        })
    }

    pub(super) async fn check_parameter_sync(&mut self) -> Outcome {
        self.touched.parameter = true;
        self.put_parameter(&self.probe.initial, false).await?;
        self.touched.parameter_external_secret = true;
        let started = Instant::now();
        let es = probe_external_secret_for(&self.probe, &self.probe.parameter_store(), None);
        self.apply_once_the_webhook_answers(&es).await?;
        self.wait_object_value(&self.probe.parameter_object, &self.probe.initial, None)
            .await?;
        Ok((
            started.elapsed(),
            format!(
                "{} -> Secret {}/{}",
                self.probe.parameter, self.probe.namespace, self.probe.parameter_object
            ),
        ))
    }

    pub(super) async fn check_parameter_rotate(&mut self) -> Outcome {
        self.put_parameter(&self.probe.rotated, true).await?;
        let started = Instant::now();
        let stamp = force_sync_stamp();
        let es =
            probe_external_secret_for(&self.probe, &self.probe.parameter_store(), Some(&stamp));
        crate::k8s::apply(&self.client, &es)
            .await
            .map_err(|e| Fail::Reason(e.message().to_string()))?;
        self.wait_object_value(&self.probe.parameter_object, &self.probe.rotated, None)
            .await?;
        Ok((started.elapsed(), String::new()))
    }

    pub(super) async fn check_parameter_recreate(&mut self) -> Outcome {
        let api = self.secrets();
        let name = self.probe.parameter_object.clone();
        let old = match api.get_opt(&name).await {
            Ok(Some(s)) => s.metadata.uid.unwrap_or_default(),
            Ok(None) => return Err(Fail::Reason(format!("Secret {name} vanished"))),
            Err(e) => return Err(Fail::Reason(format!("reading Secret {name}: {e}"))),
        };
        let started = Instant::now();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Fail::Reason(format!("deleting Secret {name}: {e}"))),
        }
        self.wait_object_value(&name, &self.probe.rotated, Some(&old))
            .await?;
        Ok((started.elapsed(), String::new()))
    }
}
