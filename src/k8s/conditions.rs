//! Reading `status.conditions` of any object given as JSON (Flux
//! Kustomizations and HelmReleases, ESO stores and ExternalSecrets all use
//! the same shape), so checks are small predicates over plain data.

use serde_json::Value;

/// One entry of `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl Condition {
    /// From the typed conditions of k8s-openapi (whose fields differ in
    /// optionality from kind to kind); empty texts count as absent.
    pub fn new(type_: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Self {
        let text = |t: Option<&str>| t.filter(|t| !t.is_empty()).map(String::from);
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: text(reason),
            message: text(message),
        }
    }

    pub fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// `reason: message`, or whichever of the two is present.
    pub fn summary(&self) -> String {
        match (self.reason.as_deref(), self.message.as_deref()) {
            (Some(r), Some(m)) if !m.is_empty() => format!("{r}: {}", one_line(m)),
            (Some(r), _) => r.to_string(),
            (None, Some(m)) => one_line(m),
            (None, None) => format!("{}={}", self.type_, self.status),
        }
    }
}

/// Every condition of `object` (which holds `status` at its top level, as a
/// full object or a `DynamicObject`'s `data` does).
pub fn conditions(object: &Value) -> Vec<Condition> {
    object["status"]["conditions"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|c| {
                    let text = |key: &str| {
                        c.get(key)
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                    };
                    Some(Condition {
                        type_: text("type")?,
                        status: text("status").unwrap_or_else(|| "Unknown".into()),
                        reason: text("reason"),
                        message: text("message"),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The condition of type `type_`, if the object reports one.
pub fn condition(object: &Value, type_: &str) -> Option<Condition> {
    conditions(object).into_iter().find(|c| c.type_ == type_)
}

/// Whether the `Ready` condition is `True`.
pub fn is_ready(object: &Value) -> bool {
    condition(object, "Ready").is_some_and(|c| c.is_true())
}

/// Messages can span lines (Helm and kustomize errors do); tables cannot.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_conditions_and_ready() {
        let object = json!({"status": {"conditions": [
            {"type": "Reconciling", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded",
             "message": "Applied revision:\n  main@sha1:abc"},
        ]}});
        let ready = condition(&object, "Ready").unwrap();
        assert!(ready.is_true());
        assert!(is_ready(&object));
        assert_eq!(
            ready.summary(),
            "ReconciliationSucceeded: Applied revision: main@sha1:abc"
        );
        assert_eq!(conditions(&object).len(), 2);
    }

    #[test]
    fn missing_status_or_odd_entries_are_not_ready() {
        assert!(!is_ready(&json!({})));
        assert!(!is_ready(&json!({"status": {"conditions": "nope"}})));
        let object = json!({"status": {"conditions": [{"status": "True"}, {"type": "Ready"}]}});
        let ready = condition(&object, "Ready").unwrap();
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.summary(), "Ready=Unknown");
        assert!(!is_ready(&object));
    }
}
