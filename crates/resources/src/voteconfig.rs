//! VoteConfig → ConfigMap, and the ConfigMap before and after apply → VoteConfig status.
//!
//! ```text
//!  VoteConfig ──desired_config_map──▶ ConfigMap <name>-config (applied)
//!  VoteConfig + ConfigMap as it was + as applied ──status──▶ VoteConfigStatus
//! ```
//!
//! `lastUpdated` times the ConfigMap's *data*: it moves when an apply changed the data
//! (or created the ConfigMap), and never when an apply changed nothing or only touched
//! metadata. Comparing the stored data before and after the apply, rather than the
//! desired data, also counts data another manager added as the unchanged state it is.

use std::collections::BTreeMap;

use bosun_api::conditions::{reasons, types};
use bosun_api::voteconfig::{VoteConfig, VoteConfigStatus, VoteOption};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use crate::conditions::{self, Desired, Refused};
use crate::meta::{child_meta, standard_labels};

/// `app.kubernetes.io/name` of VoteConfig children.
pub const APP_NAME: &str = "voteconfig";
/// The data key holding the question, when there is one (the name the voting app reads).
pub const TITLE_KEY: &str = "TITLE";
/// The data key holding every option as a JSON array of `{id, label}` (and
/// `description`, for an option that has one).
pub const OPTIONS_JSON_KEY: &str = "options.json";

/// The ConfigMap of the VoteConfig named `vote`.
pub fn config_map_name(vote: &str) -> String {
    format!("{vote}-config")
}

/// The data key of the option at `index`: `OPTION_A` for the first, `OPTION_Z` for
/// the 26th. The schema allows no more; past it (e.g. `bosun render` of a document the
/// apiserver would refuse) the letters continue like spreadsheet columns, `OPTION_AA`.
pub fn option_key(index: usize) -> String {
    let mut letters = Vec::new();
    let mut n = index + 1;
    while n > 0 {
        n -= 1;
        letters.push(char::from(b'A' + (n % 26) as u8));
        n /= 26;
    }
    letters.iter().rev().fold(String::from("OPTION_"), |mut key, c| {
        key.push(*c);
        key
    })
}

/// The options as the JSON array published under `options.json`.
pub fn options_json(options: &[VoteOption]) -> String {
    let list = options
        .iter()
        .map(|o| {
            let mut item = serde_json::json!({"id": o.id, "label": o.label});
            if let Some(description) = &o.description {
                item["description"] = serde_json::Value::String(description.clone());
            }
            item
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// The data a VoteConfig's ConfigMap should hold: one `OPTION_<letter>` per option,
/// ready for `envFrom`, `TITLE` when a question is set, and `options.json`.
pub fn desired_data(vote: &VoteConfig) -> BTreeMap<String, String> {
    let spec = &vote.spec;
    let mut data: BTreeMap<String, String> =
        spec.options.iter().enumerate().map(|(i, o)| (option_key(i), o.label.clone())).collect();
    if let Some(question) = &spec.question {
        data.insert(TITLE_KEY.to_owned(), question.clone());
    }
    data.insert(OPTIONS_JSON_KEY.to_owned(), options_json(&spec.options));
    data
}

/// The ConfigMap a VoteConfig should have.
pub fn desired_config_map(vote: &VoteConfig) -> ConfigMap {
    let name = vote.name_any();
    ConfigMap {
        metadata: child_meta(vote, config_map_name(&name), standard_labels(APP_NAME, &name)),
        data: Some(desired_data(vote)),
        ..ConfigMap::default()
    }
}

/// What the world looks like to the status computation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed<'a> {
    /// The ConfigMap as it was before this reconcile applied it (`None`: it did not exist).
    pub before: Option<&'a ConfigMap>,
    /// The ConfigMap as the apiserver returned it from the apply (`None`: not applied).
    pub applied: Option<&'a ConfigMap>,
    /// Why the spec cannot be served: the apiserver refused the ConfigMap, or its
    /// name is someone else's.
    pub refused: Option<Refused<'a>>,
}

/// The status a VoteConfig should have, given the ConfigMap before and after the apply.
pub fn status(vote: &VoteConfig, observed: Observed<'_>, now: Timestamp) -> VoteConfigStatus {
    let generation = vote.meta().generation;
    let previous = vote.status.as_ref();
    let current = observed.applied.or(observed.before);
    let data_changed = observed.applied.is_some_and(|after| after.data != observed.before.and_then(|b| b.data.clone()));
    let last_updated = match (data_changed, previous.and_then(|p| p.last_updated.clone())) {
        (true, _) => Some(Time(now)),
        (false, Some(previous)) => Some(previous),
        // Unchanged data but no record of when it changed (status lost or never written):
        // this is the first time bosun saw it as it is.
        (false, None) => current.map(|_| Time(now)),
    };
    let ready = match (observed.refused, observed.applied) {
        (Some(refused), _) => Desired::new(types::READY, false, refused.reason, refused.message),
        (None, Some(cm)) => {
            let n = vote.spec.options.len();
            let msg = format!("ConfigMap {} holds the {n} options", cm.name_any());
            Desired::new(types::READY, true, reasons::PUBLISHED, msg)
        }
        (None, None) => Desired::new(types::READY, false, reasons::PENDING, "the ConfigMap has not been applied yet"),
    };
    let previous_conditions = previous.map(|p| p.conditions.as_slice()).unwrap_or_default();
    VoteConfigStatus {
        observed_generation: generation,
        config_map_name: current.map(ResourceExt::name_any),
        last_updated,
        conditions: conditions::merge(previous_conditions, vec![ready], generation, now),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn vote(title: Option<&str>, options: &[(&str, &str)]) -> VoteConfig {
        let options: Vec<_> = options.iter().map(|(id, label)| serde_json::json!({"id": id, "label": label})).collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "voting.schoolofdevops.com/v1",
            "kind": "VoteConfig",
            "metadata": {"name": "pets", "namespace": "polls", "uid": "u-1", "generation": 4},
            "spec": {"question": title, "options": options}
        }))
        .unwrap()
    }

    fn pets() -> VoteConfig {
        vote(Some("Cats or dogs?"), &[("a", "Cats"), ("b", "Dogs")])
    }

    fn stored(data: &BTreeMap<String, String>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta { name: Some("pets-config".into()), ..ObjectMeta::default() },
            data: Some(data.clone()),
            ..ConfigMap::default()
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    #[test]
    fn option_keys_are_letters_in_order() {
        assert_eq!(option_key(0), "OPTION_A");
        assert_eq!(option_key(1), "OPTION_B");
        assert_eq!(option_key(25), "OPTION_Z");
        assert_eq!(option_key(26), "OPTION_AA");
        assert_eq!(option_key(27), "OPTION_AB");
    }

    #[test]
    fn config_map_holds_labels_title_and_the_json_list() {
        let cm = desired_config_map(&pets());
        assert_eq!(cm.metadata.name.as_deref(), Some("pets-config"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("polls"));
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("VoteConfig", "u-1", Some(true)));
        let labels = cm.metadata.labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "voteconfig");
        assert_eq!(labels["app.kubernetes.io/instance"], "pets");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "bosun");
        let data = cm.data.unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["OPTION_A", "OPTION_B", "TITLE", "options.json"]);
        assert_eq!((data["OPTION_A"].as_str(), data["OPTION_B"].as_str()), ("Cats", "Dogs"));
        assert_eq!(data["TITLE"], "Cats or dogs?");
        let list: serde_json::Value = serde_json::from_str(&data["options.json"]).unwrap();
        assert_eq!(list, serde_json::json!([{"id": "a", "label": "Cats"}, {"id": "b", "label": "Dogs"}]));
    }

    #[test]
    fn a_description_is_published_in_the_json_list_only() {
        let mut v = pets();
        v.spec.options[0].description = Some("Independent and quiet".into());
        let data = desired_data(&v);
        let list: serde_json::Value = serde_json::from_str(&data["options.json"]).unwrap();
        assert_eq!(
            list,
            serde_json::json!([{"id": "a", "label": "Cats", "description": "Independent and quiet"}, {"id": "b", "label": "Dogs"}])
        );
        assert_eq!(data["OPTION_A"], "Cats");
    }

    #[test]
    fn no_title_no_title_key_and_labels_may_be_any_text() {
        let data = desired_data(&vote(None, &[("x", "Tabs \"quoted\""), ("y", "Spaces, ünïcode")]));
        assert!(!data.contains_key("TITLE"));
        let list: Vec<VoteOption> = serde_json::from_str(&data["options.json"]).unwrap();
        assert_eq!(list[0].label, "Tabs \"quoted\"");
        assert_eq!(data["OPTION_B"], "Spaces, ünïcode");
    }

    #[test]
    fn first_publish_sets_last_updated_and_ready() {
        let v = pets();
        let applied = stored(&desired_data(&v));
        let s = status(&v, Observed { before: None, applied: Some(&applied), refused: None }, at(0));
        assert_eq!(s.config_map_name.as_deref(), Some("pets-config"));
        assert_eq!(s.last_updated, Some(Time(at(0))));
        assert_eq!(s.observed_generation, Some(4));
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str(), ready.reason.as_str()),
            ("Ready", "True", "Published")
        );
    }

    #[test]
    fn an_apply_that_changed_nothing_keeps_the_whole_status() {
        let mut v = pets();
        let cm = stored(&desired_data(&v));
        let first = status(&v, Observed { before: None, applied: Some(&cm), refused: None }, at(0));
        v.status = Some(first.clone());
        let again = status(&v, Observed { before: Some(&cm), applied: Some(&cm), refused: None }, at(600));
        assert_eq!(again, first);
    }

    #[test]
    fn metadata_only_changes_keep_last_updated() {
        let mut v = pets();
        let cm = stored(&desired_data(&v));
        v.status = Some(status(&v, Observed { before: None, applied: Some(&cm), refused: None }, at(0)));
        let mut relabelled = cm.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("team".into(), "x".into())]));
        let s = status(&v, Observed { before: Some(&cm), applied: Some(&relabelled), refused: None }, at(60));
        assert_eq!(s.last_updated, Some(Time(at(0))));
    }

    #[test]
    fn a_changed_label_moves_last_updated_but_not_the_ready_transition() {
        let mut v = pets();
        let old = stored(&desired_data(&v));
        v.status = Some(status(&v, Observed { before: None, applied: Some(&old), refused: None }, at(0)));
        v.spec.options[1].label = "Hamsters".into();
        let new = stored(&desired_data(&v));
        let s = status(&v, Observed { before: Some(&old), applied: Some(&new), refused: None }, at(60));
        assert_eq!(s.last_updated, Some(Time(at(60))));
        assert_eq!(s.conditions[0].last_transition_time, Time(at(0)));
    }

    #[test]
    fn a_restored_config_map_counts_as_changed_data() {
        // Deleted or edited by hand, then put back: the consumers saw the data change.
        let mut v = pets();
        let cm = stored(&desired_data(&v));
        v.status = Some(status(&v, Observed { before: None, applied: Some(&cm), refused: None }, at(0)));
        let s = status(&v, Observed { before: None, applied: Some(&cm), refused: None }, at(30));
        assert_eq!(s.last_updated, Some(Time(at(30))));
        let mut edited = cm.clone();
        edited.data.as_mut().unwrap().insert("OPTION_A".into(), "Mice".into());
        let s = status(&v, Observed { before: Some(&edited), applied: Some(&cm), refused: None }, at(40));
        assert_eq!(s.last_updated, Some(Time(at(40))));
    }

    #[test]
    fn lost_status_is_rebuilt_without_inventing_a_change_each_time() {
        let v = pets();
        let cm = stored(&desired_data(&v));
        let s = status(&v, Observed { before: Some(&cm), applied: Some(&cm), refused: None }, at(5));
        assert_eq!(s.last_updated, Some(Time(at(5))));
    }

    #[test]
    fn refused_config_map_is_not_ready_and_keeps_what_exists() {
        let mut v = pets();
        let cm = stored(&desired_data(&v));
        v.status = Some(status(&v, Observed { before: None, applied: Some(&cm), refused: None }, at(0)));
        let s = status(
            &v,
            Observed { before: Some(&cm), applied: None, refused: Some(Refused::invalid_spec("too big")) },
            at(9),
        );
        assert_eq!(s.config_map_name.as_deref(), Some("pets-config"));
        assert_eq!(s.last_updated, Some(Time(at(0))));
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str(), ready.message.as_str()),
            ("False", "InvalidSpec", "too big")
        );
        assert_eq!(ready.last_transition_time, Time(at(9)));
        let none =
            status(&pets(), Observed { refused: Some(Refused::invalid_spec("too big")), ..Observed::default() }, at(9));
        assert_eq!((none.config_map_name, none.last_updated), (None, None));
    }
}
