//! What devstack may do on a cluster it did not create. Its own clusters
//! make it admin; a cluster the user brings comes with whatever rights the
//! kubeconfig user has. Asking the API server first (one
//! SelfSubjectAccessReview per permission) lets a command refuse before it
//! creates anything, naming every missing permission at once, instead of
//! failing half-way with one `forbidden` at a time.

use std::fmt;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::error::Error;

/// Reviews in flight at once: enough to hide the round trips of a list of
/// tens of permissions, few enough not to look like a flood to the server.
const CONCURRENT_REVIEWS: usize = 8;

/// One verb on one kind of resource, cluster-wide or in one namespace, as
/// RBAC grants it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Permission {
    pub verb: String,
    /// The API group; empty for the core group (pods, services, ...).
    pub group: String,
    /// The plural resource name (`deployments`, not `Deployment`).
    pub resource: String,
    /// `None`: cluster-wide (cluster-scoped kinds, or every namespace).
    pub namespace: Option<String>,
}

impl Permission {
    pub fn cluster_wide(
        verb: impl Into<String>,
        group: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        Permission {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: None,
        }
    }

    pub fn namespaced(
        verb: impl Into<String>,
        group: impl Into<String>,
        resource: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Self {
        Permission {
            namespace: Some(namespace.into()),
            ..Self::cluster_wide(verb, group, resource)
        }
    }

    fn review(&self) -> SelfSubjectAccessReview {
        SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(self.verb.clone()),
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    namespace: self.namespace.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// `create deployments.apps in namespace localstack`: the resource as
/// `kubectl auth can-i` and RBAC rules spell it, so the line can be
/// pasted into either.
impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace}"),
            None => f.write_str(" (cluster-wide)"),
        }
    }
}

/// The permissions of `wanted` the client's user does not have, in the
/// order given. A review the server answers is never an error, whatever
/// its answer; a review it cannot answer is, naming the permission.
pub async fn missing(
    client: &kube::Client,
    wanted: &[Permission],
) -> Result<Vec<Permission>, Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    // Owned per review: a borrowing closure is not `Send` for every lifetime,
    // which a boxed provider future needs.
    let allowed: Vec<bool> = futures::stream::iter(wanted.iter().cloned())
        .map(|permission| {
            let api = api.clone();
            async move { allowed(&api, &permission).await }
        })
        .buffered(CONCURRENT_REVIEWS)
        .try_collect()
        .await?;
    Ok(wanted
        .iter()
        .zip(allowed)
        .filter(|(_, allowed)| !allowed)
        .map(|(permission, _)| permission.clone())
        .collect())
}

async fn allowed(
    api: &Api<SelfSubjectAccessReview>,
    permission: &Permission,
) -> Result<bool, Error> {
    let what = || format!("check whether the cluster allows `{permission}`");
    match api
        .create(&PostParams::default(), &permission.review())
        .await
    {
        Ok(review) => Ok(review.status.is_some_and(|s| s.allowed)),
        // Refused credentials are the user's to renew, not a bug.
        Err(kube::Error::Api(status)) if status.code == 401 => {
            Err(
                Error::prerequisite(format!("{}: {}", what(), status.message)).with_hint(
                    "the API server refused the kubeconfig's credentials: log in to the \
                     cluster again (renew the token), or pick another context with `--context`",
                ),
            )
        }
        Err(e) => Err(Error::internal(format!("{}: {e}", what()))),
    }
}

/// The one error for every permission `missing` found: a user fixing RBAC
/// wants the whole list in one go, and to know nothing was left behind.
pub fn refusal(context: &str, missing: &[Permission]) -> Error {
    let lines: Vec<String> = missing.iter().map(|p| format!("  {p}")).collect();
    let count = match missing.len() {
        1 => "a permission".to_string(),
        n => format!("{n} permissions"),
    };
    Error::prerequisite(format!(
        "the kubeconfig user of context `{context}` lacks {count} devstack needs; \
         nothing was created:\n{}",
        lines.join("\n")
    ))
    .with_hint(format!(
        "ask the cluster's admin to bind a role granting them to the kubeconfig user of \
         context `{context}`, or use a context with more rights (`--context NAME`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn crd() -> Permission {
        Permission::cluster_wide(
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        )
    }

    fn deployments() -> Permission {
        Permission::namespaced("create", "apps", "deployments", "localstack")
    }

    #[test]
    fn a_permission_reads_as_rbac_spells_it() {
        assert_eq!(
            crd().to_string(),
            "create customresourcedefinitions.apiextensions.k8s.io (cluster-wide)"
        );
        assert_eq!(
            deployments().to_string(),
            "create deployments.apps in namespace localstack"
        );
        assert_eq!(
            Permission::namespaced("get", "", "secrets", "flux-system").to_string(),
            "get secrets in namespace flux-system"
        );
    }

    #[test]
    fn the_refusal_lists_every_missing_permission() {
        let secrets = Permission::cluster_wide("list", "", "secrets");
        let error = refusal("prod-admin", &[crd(), deployments(), secrets.clone()]);
        assert_eq!(error.kind(), Kind::Prerequisite);
        assert_eq!(
            error.message(),
            "the kubeconfig user of context `prod-admin` lacks 3 permissions devstack needs; \
             nothing was created:\n\
             \x20 create customresourcedefinitions.apiextensions.k8s.io (cluster-wide)\n\
             \x20 create deployments.apps in namespace localstack\n\
             \x20 list secrets (cluster-wide)"
        );
        let hint = error.hint().unwrap();
        assert!(hint.contains("context `prod-admin`"), "{hint}");
        assert!(hint.contains("--context"), "{hint}");
        assert!(
            refusal("c", &[secrets])
                .message()
                .contains("lacks a permission")
        );
    }

    /// Answers SelfSubjectAccessReviews like an API server whose RBAC
    /// grants exactly `granted` (each as its Display line), after a short
    /// pause so that reviews overlap; counts the most in flight at once.
    /// A review of `fail` gets a 500 and one of `expired` a 401.
    #[derive(Clone, Default)]
    struct Server {
        granted: Arc<HashSet<String>>,
        fail: Option<String>,
        expired: Option<String>,
        in_flight: Arc<AtomicUsize>,
        most_in_flight: Arc<AtomicUsize>,
    }

    impl Server {
        fn granting(granted: &[Permission]) -> Self {
            Server {
                granted: Arc::new(granted.iter().map(ToString::to_string).collect()),
                ..Default::default()
            }
        }

        fn client(&self) -> kube::Client {
            let server = self.clone();
            let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let server = server.clone();
                async move { Ok::<_, std::convert::Infallible>(server.answer(request).await) }
            });
            kube::Client::new(service, "default")
        }

        async fn answer(
            &self,
            request: http::Request<kube::client::Body>,
        ) -> http::Response<kube::client::Body> {
            assert_eq!(request.method(), http::Method::POST);
            assert_eq!(
                request.uri().path(),
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
            );
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);

            let body = request.into_body().collect_bytes().await.unwrap();
            let mut review: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let attributes = &review["spec"]["resourceAttributes"];
            let text = |key: &str| attributes[key].as_str().unwrap_or_default().to_string();
            let permission = Permission {
                verb: text("verb"),
                group: text("group"),
                resource: text("resource"),
                namespace: attributes["namespace"].as_str().map(String::from),
            }
            .to_string();
            let failure = |code: u16, reason: &str| {
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": reason, "reason": reason, "code": code,
                });
                http::Response::builder()
                    .status(code)
                    .body(serde_json::to_vec(&status).unwrap().into())
                    .unwrap()
            };
            if self.fail.as_ref() == Some(&permission) {
                return failure(500, "InternalError");
            }
            if self.expired.as_ref() == Some(&permission) {
                return failure(401, "Unauthorized");
            }
            let allowed = self.granted.contains(&permission);
            review["status"] = serde_json::json!({ "allowed": allowed });
            http::Response::new(serde_json::to_vec(&review).unwrap().into())
        }
    }

    fn many() -> Vec<Permission> {
        (0..20)
            .map(|i| Permission::namespaced("create", "", "configmaps", format!("ns{i}")))
            .collect()
    }

    #[tokio::test]
    async fn missing_keeps_the_denied_permissions_in_order() {
        let wanted = [
            vec![crd(), deployments()],
            many(),
            vec![Permission::cluster_wide("list", "", "secrets")],
        ]
        .concat();
        let granted: Vec<Permission> = many()
            .into_iter()
            .step_by(2)
            .chain([deployments()])
            .collect();
        let server = Server::granting(&granted);
        let denied = missing(&server.client(), &wanted).await.unwrap();
        let expected: Vec<Permission> = [crd()]
            .into_iter()
            .chain(many().into_iter().skip(1).step_by(2))
            .chain([Permission::cluster_wide("list", "", "secrets")])
            .collect();
        assert_eq!(denied, expected);
        let most = server.most_in_flight.load(Ordering::SeqCst);
        assert!(
            (2..=CONCURRENT_REVIEWS).contains(&most),
            "{most} reviews in flight at once"
        );

        let all = Server::granting(&wanted);
        assert!(missing(&all.client(), &wanted).await.unwrap().is_empty());
        assert!(missing(&all.client(), &[]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_review_the_server_cannot_answer_names_the_permission() {
        let server = Server {
            fail: Some(deployments().to_string()),
            ..Server::granting(&[crd()])
        };
        let error = missing(&server.client(), &[crd(), deployments()])
            .await
            .unwrap_err();
        assert_eq!(error.kind(), Kind::Internal);
        assert!(
            error
                .message()
                .contains("`create deployments.apps in namespace localstack`"),
            "{error:?}"
        );

        let server = Server {
            expired: Some(crd().to_string()),
            ..Server::default()
        };
        let error = missing(&server.client(), &[crd()]).await.unwrap_err();
        assert_eq!(error.kind(), Kind::Prerequisite);
        assert!(error.hint().unwrap().contains("credentials"), "{error:?}");
    }
}
