//! Recorded evidence for the detectors' tests: a healthy ci stack
//! (`fixtures/healthy.json`), which each test breaks in one place.

use serde_json::Value;

use super::{Evidence, Finding};
use crate::profile::Settings;

pub fn healthy_json() -> Value {
    serde_json::from_str(include_str!("fixtures/healthy.json")).expect("healthy.json parses")
}

pub fn healthy() -> Evidence {
    serde_json::from_value(healthy_json()).expect("healthy.json is evidence")
}

/// The healthy evidence with one edit.
pub fn with(edit: impl FnOnce(&mut Value)) -> Evidence {
    let mut json = healthy_json();
    edit(&mut json);
    serde_json::from_value(json).expect("edited evidence is evidence")
}

/// The shipped ci profile, as the fixture's stack uses it.
pub fn settings() -> Settings {
    let loaded = crate::profile::load_reference("ci").expect("ci profile");
    Settings::resolve(loaded, &Default::default()).expect("ci resolves")
}

/// The findings of one detector.
pub fn of<'a>(findings: &'a [Finding], detector: &str) -> Vec<&'a Finding> {
    findings.iter().filter(|f| f.detector == detector).collect()
}

/// The only finding of `detector` among every detector's findings.
#[track_caller]
pub fn only(evidence: &Evidence, detector: &str) -> Finding {
    let findings = super::detect(evidence, &settings());
    let found = of(&findings, detector);
    assert_eq!(found.len(), 1, "{detector}: {findings:#?}");
    found[0].clone()
}

/// The finding of an API server that does not answer, its fix `command`.
pub fn unreachable_api_finding(command: Option<&str>) -> Finding {
    let evidence = super::Evidence {
        cluster: super::ClusterEvidence {
            kubeconfig: true,
            api_error: Some("connection refused".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut finding =
        super::detect(&evidence, &Settings::builtin(&Default::default()).unwrap()).remove(0);
    finding.fix.command = command.map(String::from);
    finding
}
