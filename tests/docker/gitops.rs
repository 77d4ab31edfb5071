//! Docker tier: publishing the GitOps tree to the stack's LocalStack S3
//! bucket that the Flux Bucket source reads.

use crate::common::*;

async fn keys(settings: &devstack::profile::Settings) -> Vec<String> {
    let s3 = devstack::aws::s3(settings);
    let list = s3
        .list_objects_v2()
        .bucket(devstack::gitops::source::BUCKET)
        .send()
        .await
        .unwrap();
    let mut keys: Vec<String> = list
        .contents()
        .iter()
        .filter_map(|o| o.key().map(String::from))
        .collect();
    keys.sort();
    keys
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn publishing_makes_the_bucket_hold_exactly_the_tree() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("publish");
    let profile = stack.profile("");
    stack.run(&profile, &["localstack", "up"]).ok();
    let settings = settings(&profile);
    let rt = runtime();
    rt.block_on(async {
        use devstack::gitops::{manifests, source};
        let tree = manifests::prepare(
            manifests::embedded(),
            "manifests",
            devstack::profile::GitopsLayout::Chain,
            false,
        )
        .unwrap();
        let mut objects = manifests::Tree::new();
        for (path, bytes) in &tree {
            objects.insert(format!("external-secrets/{path}"), bytes.clone());
        }
        objects.insert("stale/old.yaml".into(), b"kind: X\n".to_vec());
        let first = source::publish(&settings, &objects).await.unwrap();
        assert_eq!(first.objects, tree.len() + 1);
        assert!(
            keys(&settings)
                .await
                .contains(&"stale/old.yaml".to_string())
        );

        objects.remove("stale/old.yaml");
        let second = source::publish(&settings, &objects).await.unwrap();
        assert_eq!(
            second.removed, 1,
            "objects no longer in the tree are removed"
        );
        let expected: Vec<String> = objects.keys().cloned().collect();
        assert_eq!(keys(&settings).await, expected);
        let s3 = devstack::aws::s3(&settings);
        let body = s3
            .get_object()
            .bucket(source::BUCKET)
            .key("external-secrets/kustomization.yaml")
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes();
        assert_eq!(body.as_ref(), tree["kustomization.yaml"].as_slice());
    });
    stack.run(&profile, &["localstack", "down"]).ok();
    // With LocalStack gone, publishing is a clear prerequisite error.
    let err = rt
        .block_on(devstack::gitops::source::publish(
            &settings,
            &Default::default(),
        ))
        .unwrap_err();
    assert_eq!(err.kind(), devstack::Kind::Prerequisite, "{err:?}");
    assert!(err.message().contains("LocalStack S3"), "{err:?}");
    assert!(err.hint().unwrap().contains("devstack localstack up"));
}
