//! The least-privilege RBAC generated from the permissions the code declares
//! ([`crate::permissions`], every controller's from [`crate::kinds`]): `make manifests`
//! → `config/rbac/`. The e2e tests run bosun with exactly the generated roles, so a
//! permission missing there fails them.

use std::collections::BTreeMap;

use crate::permissions::{CONVERSION, LEADER_ELECTION, MANAGER, Permission, WEBHOOK_CERTIFICATES, WEBHOOKS, rules};

/// Where bosun runs when deployed from `config/` (kubebuilder's `<project>-system`).
pub const NAMESPACE: &str = "bosun-system";
pub const SERVICE_ACCOUNT: &str = "bosun-controller-manager";
pub const CLUSTER_ROLE: &str = "bosun-manager-role";
pub const CLUSTER_ROLE_BINDING: &str = "bosun-manager-rolebinding";
/// The Role (in [`NAMESPACE`]) with the [`LEADER_ELECTION`] permissions.
pub const LEADER_ELECTION_ROLE: &str = "bosun-leader-election-role";
pub const LEADER_ELECTION_ROLE_BINDING: &str = "bosun-leader-election-rolebinding";

/// The permissions of the ClusterRole: the manager's and every controller's, in every
/// namespace bosun serves.
pub fn cluster_permissions() -> Vec<Permission> {
    [MANAGER, &crate::kinds::permissions(), WEBHOOKS, CONVERSION].concat()
}

/// The permissions of the leader-election Role, in bosun's own namespace only.
pub fn namespaced_permissions() -> Vec<Permission> {
    [LEADER_ELECTION, WEBHOOK_CERTIFICATES].concat()
}

/// Every permission bosun uses, cluster-wide and namespaced.
pub fn all_permissions() -> Vec<Permission> {
    [cluster_permissions(), namespaced_permissions()].concat()
}

/// The files of `config/rbac/`: ServiceAccount, ClusterRole and ClusterRoleBinding, the
/// leader-election Role and RoleBinding in [`NAMESPACE`], and a kustomization listing
/// them. Paths are relative to `config/rbac/`.
pub fn files() -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const HEADER: &str = "# Generated from the permissions declared in the code by `make manifests`. Do not edit.\n";
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_owned(), "bosun".to_owned())])),
        ..ObjectMeta::default()
    };
    let account = ServiceAccount { metadata: meta(SERVICE_ACCOUNT, Some(NAMESPACE)), ..ServiceAccount::default() };
    let subjects = || {
        Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: SERVICE_ACCOUNT.into(),
            namespace: Some(NAMESPACE.into()),
            api_group: None,
        }])
    };
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    };
    let role = ClusterRole {
        metadata: meta(CLUSTER_ROLE, None),
        rules: Some(rules(&cluster_permissions())),
        aggregation_rule: None,
    };
    let binding = ClusterRoleBinding {
        metadata: meta(CLUSTER_ROLE_BINDING, None),
        role_ref: role_ref("ClusterRole", CLUSTER_ROLE),
        subjects: subjects(),
    };
    let leader_role =
        Role { metadata: meta(LEADER_ELECTION_ROLE, Some(NAMESPACE)), rules: Some(rules(&namespaced_permissions())) };
    let leader_binding = RoleBinding {
        metadata: meta(LEADER_ELECTION_ROLE_BINDING, Some(NAMESPACE)),
        role_ref: role_ref("Role", LEADER_ELECTION_ROLE),
        subjects: subjects(),
    };
    let mut files = vec![
        ("service_account.yaml".to_owned(), serde_yaml_ng::to_string(&account)?),
        ("role.yaml".to_owned(), serde_yaml_ng::to_string(&role)?),
        ("role_binding.yaml".to_owned(), serde_yaml_ng::to_string(&binding)?),
        ("leader_election_role.yaml".to_owned(), serde_yaml_ng::to_string(&leader_role)?),
        ("leader_election_role_binding.yaml".to_owned(), serde_yaml_ng::to_string(&leader_binding)?),
    ];
    let mut kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n".to_owned();
    for (path, _) in &files {
        kustomization.push_str(&format!("- {path}\n"));
    }
    files.push(("kustomization.yaml".to_owned(), kustomization));
    Ok(files.into_iter().map(|(path, yaml)| (path, format!("{HEADER}{yaml}"))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::{CHECKPOINTS, WEBHOOK_SECRET_VERBS, rules};

    #[test]
    fn the_cluster_role_grants_no_leases_and_keeps_events() {
        let rules = rules(&cluster_permissions());
        let groups: Vec<_> = rules.iter().flat_map(|r| r.api_groups.iter().flatten()).collect();
        assert!(!groups.iter().any(|g| *g == "coordination.k8s.io"), "leases in the ClusterRole: {rules:?}");
        let events = rules
            .iter()
            .find(|r| r.api_groups == Some(vec!["events.k8s.io".to_owned()]))
            .expect("events in the ClusterRole: they are written in every namespace bosun serves");
        assert_eq!(events.verbs, vec!["create", "patch"]);
    }

    #[test]
    fn the_namespaced_role_grants_exactly_the_lease_and_the_certificate_secret() {
        let rules = rules(&namespaced_permissions());
        let summary: Vec<_> = rules
            .iter()
            .map(|r| (r.api_groups.clone().unwrap()[0].clone(), r.resources.clone().unwrap(), r.verbs.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("".to_owned(), vec!["secrets".to_owned()], vec!["update".to_owned()]),
                (
                    "coordination.k8s.io".to_owned(),
                    vec!["leases".to_owned()],
                    ["create", "delete", "get", "list", "patch"].map(str::to_owned).to_vec()
                ),
            ]
        );
    }

    /// The checkpoints in bosun's own namespace need nothing of their own: the
    /// ClusterRole's ConfigMap verbs (for VoteConfig and AppConfig) cover them.
    #[test]
    fn the_cluster_role_covers_the_checkpoints() {
        let cluster = cluster_permissions();
        for need in CHECKPOINTS {
            for verb in need.verbs {
                assert!(
                    cluster.iter().any(|c| c.group == need.group && c.name() == need.name() && c.verbs.contains(verb)),
                    "checkpoints need {}/{} {verb}",
                    need.group,
                    need.name()
                );
            }
        }
    }

    #[test]
    fn no_verb_is_granted_both_cluster_wide_and_namespaced() {
        let cluster = cluster_permissions();
        for p in namespaced_permissions() {
            for c in cluster.iter().filter(|c| c.group == p.group && c.name() == p.name()) {
                let both: Vec<_> = p.verbs.iter().filter(|v| c.verbs.contains(v)).collect();
                assert!(
                    both.is_empty(),
                    "{}/{} {both:?} granted both cluster-wide and in {NAMESPACE}",
                    p.group,
                    p.name()
                );
            }
        }
    }

    #[test]
    fn the_webhooks_may_use_every_verb_they_call_on_their_secret() {
        let granted: Vec<&str> = [cluster_permissions(), namespaced_permissions()]
            .concat()
            .into_iter()
            .filter(|p| p.group.is_empty() && p.name() == "secrets")
            .flat_map(|p| p.verbs.iter().copied())
            .collect();
        for verb in WEBHOOK_SECRET_VERBS {
            assert!(granted.contains(verb), "secrets {verb} is not granted");
        }
    }

    #[test]
    fn files_include_the_leader_election_role_in_bosuns_namespace() {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

        let files = files().expect("files");
        let get = |name: &str| {
            files.iter().find(|(p, _)| p == name).map(|(_, y)| y.clone()).unwrap_or_else(|| panic!("no {name}"))
        };
        let role: Role = serde_yaml_ng::from_str(&get("leader_election_role.yaml")).expect("Role");
        assert_eq!(role.metadata.name.as_deref(), Some(LEADER_ELECTION_ROLE));
        assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(role.rules, Some(rules(&namespaced_permissions())));
        let binding: RoleBinding = serde_yaml_ng::from_str(&get("leader_election_role_binding.yaml")).expect("binding");
        assert_eq!(binding.metadata.name.as_deref(), Some(LEADER_ELECTION_ROLE_BINDING));
        assert_eq!(binding.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!((binding.role_ref.kind.as_str(), binding.role_ref.name.as_str()), ("Role", LEADER_ELECTION_ROLE));
        let subject = &binding.subjects.expect("subjects")[0];
        assert_eq!((subject.name.as_str(), subject.namespace.as_deref()), (SERVICE_ACCOUNT, Some(NAMESPACE)));

        let kustomization = get("kustomization.yaml");
        for (path, _) in files.iter().filter(|(p, _)| p != "kustomization.yaml") {
            assert!(kustomization.contains(&format!("- {path}\n")), "{path} not in kustomization.yaml");
        }
    }
}
