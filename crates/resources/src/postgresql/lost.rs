//! An instance whose data lives only on a lost node: found, reported, and replaced
//! when the user allows it (the annotation [`REPLACE_ANNOTATION`]).
//!
//! A local volume (local-path, TopoLVM, a `local` PersistentVolume) carries a
//! required node affinity to the one node whose disk holds it, so its claim's pod
//! can run nowhere else: while that node is gone, the instance cannot come back, and
//! bosun can neither move it nor know whether the node will return. So it reports
//! it, and replaces it only when asked: the old volume is kept (`Retain`), the claim
//! and the pod are deleted, and the StatefulSet makes a new claim and pod where a
//! node can take them; the new instance, with no data, clones the primary.

use k8s_openapi::api::core::v1::{Node, PersistentVolume};

pub use bosun_api::postgresql::REPLACE_ANNOTATION;

/// The node label a local volume's affinity names.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// The one node `pv` can be used on, when its required node affinity names exactly
/// one by hostname (a zonal disk's affinity names a zone: it follows its pod).
pub fn pinned_node(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
    let mut nodes = terms.iter().flat_map(|term| {
        term.match_expressions
            .iter()
            .flatten()
            .filter(|e| e.key == HOSTNAME && e.operator == "In")
            .flat_map(|e| e.values.iter().flatten())
    });
    let node = nodes.next()?;
    // Every term must name it alone (terms are ORed: another term, another node).
    let alone = nodes.all(|n| n == node) && terms.iter().all(|t| names_hostname(t, node));
    alone.then(|| node.clone())
}

fn names_hostname(term: &k8s_openapi::api::core::v1::NodeSelectorTerm, node: &str) -> bool {
    term.match_expressions
        .iter()
        .flatten()
        .any(|e| e.key == HOSTNAME && e.operator == "In" && e.values.as_deref() == Some(&[node.to_owned()]))
}

/// Whether Kubernetes holds `node` lost: gone, or its Ready condition not True (the
/// node controller's verdict after its grace period).
pub fn node_lost(node: Option<&Node>) -> bool {
    let ready = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    !ready
}

/// What an instance with data on a lost node is, as far as the replacement goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostInstance {
    /// Its pod.
    pub name: String,
    /// The node with its data.
    pub node: String,
    /// Its data's PersistentVolume, and that volume's uid.
    pub volume: String,
    pub volume_uid: String,
    /// Whether Kubernetes holds the node lost too ([`node_lost`]), not only bosun's
    /// heartbeat.
    pub node_not_ready: bool,
}

/// What to do about the annotation asking to replace `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Keep its volume, delete its claim and pod.
    Go(LostInstance),
    /// Not yet: the annotation stays; why.
    Wait(String),
    /// Never: the annotation goes; why.
    Refuse(String),
}

/// The decision on replacing `target` (the annotation's value): `instances` are the
/// database's pods, `lost` those with data on a lost node, `primary` the one labelled
/// primary and whether it is Ready.
pub fn decide(target: &str, instances: &[String], lost: &[LostInstance], primary: Option<(&str, bool)>) -> Replace {
    if !instances.iter().any(|i| i == target) {
        return Replace::Refuse(format!(
            "{target} is not an instance of this database (it has {})",
            instances.join(", ")
        ));
    }
    if primary.is_some_and(|(p, _)| p == target) {
        return Replace::Refuse(format!(
            "{target} is the primary: bosun fails it over first when its node is lost; ask again once another \
             instance is primary"
        ));
    }
    let Some(instance) = lost.iter().find(|l| l.name == target) else {
        return Replace::Refuse(format!(
            "{target}'s data is not on a lost node (its volume is not local to one node, or the node and the \
             instance answer): nothing to replace"
        ));
    };
    if !instance.node_not_ready {
        return Replace::Wait(format!(
            "{target}'s node {} does not answer, but Kubernetes still holds it Ready: waiting for the node \
             controller to mark it NotReady",
            instance.node
        ));
    }
    match primary {
        Some((_, true)) => Replace::Go(instance.clone()),
        _ => Replace::Wait(format!("no primary is ready for a new {target} to clone")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pv(affinity: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "pv"}, "spec": {"nodeAffinity": affinity}})).unwrap()
    }

    fn hostname_in(values: &[&str]) -> serde_json::Value {
        json!({"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": values}]})
    }

    #[test]
    fn a_volume_pinned_to_one_host_names_it_and_others_name_none() {
        let local = pv(json!({"required": {"nodeSelectorTerms": [hostname_in(&["node-a"])]}}));
        assert_eq!(pinned_node(&local).as_deref(), Some("node-a"));
        let zonal = pv(json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}]}}));
        assert_eq!(pinned_node(&zonal), None);
        let two_hosts = pv(json!({"required": {"nodeSelectorTerms": [hostname_in(&["node-a", "node-b"])]}}));
        assert_eq!(pinned_node(&two_hosts), None);
        let two_terms =
            pv(json!({"required": {"nodeSelectorTerms": [hostname_in(&["node-a"]), hostname_in(&["node-b"])]}}));
        assert_eq!(pinned_node(&two_terms), None);
        assert_eq!(pinned_node(&pv(serde_json::Value::Null)), None);
    }

    #[test]
    fn a_node_is_lost_when_gone_or_not_ready() {
        let node = |status: &str| -> Node {
            serde_json::from_value(json!({"status": {"conditions": [{"type": "Ready", "status": status}]}})).unwrap()
        };
        assert!(!node_lost(Some(&node("True"))));
        assert!(node_lost(Some(&node("Unknown"))));
        assert!(node_lost(Some(&node("False"))));
        assert!(node_lost(None));
    }

    #[test]
    fn only_a_standby_on_a_node_kubernetes_holds_lost_is_replaced() {
        let instances = vec!["db-0".to_owned(), "db-1".to_owned()];
        let lost = |not_ready| {
            vec![LostInstance {
                name: "db-1".into(),
                node: "n2".into(),
                volume: "pv-1".into(),
                volume_uid: "uid-pv-1".into(),
                node_not_ready: not_ready,
            }]
        };
        assert_eq!(decide("db-1", &instances, &lost(true), Some(("db-0", true))), Replace::Go(lost(true)[0].clone()));
        assert!(
            matches!(decide("db-1", &instances, &lost(false), Some(("db-0", true))), Replace::Wait(w) if w.contains("Ready"))
        );
        assert!(matches!(decide("db-1", &instances, &lost(true), Some(("db-0", false))), Replace::Wait(_)));
        assert!(
            matches!(decide("db-1", &instances, &lost(true), Some(("db-1", true))), Replace::Refuse(r) if r.contains("primary"))
        );
        assert!(
            matches!(decide("db-1", &instances, &[], Some(("db-0", true))), Replace::Refuse(r) if r.contains("not on a lost node"))
        );
        assert!(
            matches!(decide("db-7", &instances, &lost(true), Some(("db-0", true))), Replace::Refuse(r) if r.contains("db-0, db-1"))
        );
    }
}
