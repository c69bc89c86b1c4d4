//! The permissions bosun uses, declared next to the code that uses them, and the
//! least-privilege RBAC generated from them (`make manifests` → `config/rbac/`).
//!
//! Each controller module exports `PERMISSIONS`; the manager adds what it needs itself
//! (events, the leader Lease). The e2e tests run bosun with exactly the generated
//! ClusterRole, so a permission missing here fails them.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::PolicyRule;

/// Verbs on one resource (or one of its subresources) of one API group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub verbs: &'static [&'static str],
}

impl Permission {
    pub const fn new(group: &'static str, resource: &'static str, verbs: &'static [&'static str]) -> Self {
        Self { group, resource, subresource: None, verbs }
    }

    pub const fn sub(
        group: &'static str,
        resource: &'static str,
        sub: &'static str,
        verbs: &'static [&'static str],
    ) -> Self {
        Self { group, resource, subresource: Some(sub), verbs }
    }

    /// `resource` or `resource/subresource`, as RBAC spells it.
    pub fn name(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        }
    }
}

/// A kind bosun reconciles: watched, and read fresh at the start of each reconcile.
pub const RECONCILED: &[&str] = &["get", "list", "watch"];
/// Watching and server-side applying a child (`create` for an apply that creates it).
pub const OWN: &[&str] = &["create", "list", "patch", "watch"];
/// Status written with server-side apply.
pub const STATUS: &[&str] = &["patch"];
/// Owner references with `blockOwnerDeletion` need `update` on the owner's finalizers
/// where the OwnerReferencesPermissionEnforcement admission plugin is on.
pub const FINALIZERS: &[&str] = &["update"];

/// The permissions of a reconciled kind: watch it, write its status, own children.
pub const fn reconciled(group: &'static str, plural: &'static str) -> [Permission; 3] {
    [
        Permission::new(group, plural, RECONCILED),
        Permission::sub(group, plural, "status", STATUS),
        Permission::sub(group, plural, "finalizers", FINALIZERS),
    ]
}

/// What the manager itself needs: events on the resources, and the leader Lease.
pub const MANAGER: &[Permission] = &[
    Permission::new("events.k8s.io", "events", &["create", "patch"]),
    Permission::new("coordination.k8s.io", "leases", &["create", "get", "patch"]),
];

/// The rules of the ClusterRole: permissions merged per (group, verbs), resources and
/// verbs sorted, so the generated YAML is stable.
pub fn rules(permissions: &[Permission]) -> Vec<PolicyRule> {
    let mut by_group_resource: BTreeMap<(&str, String), Vec<&str>> = BTreeMap::new();
    for p in permissions {
        let verbs = by_group_resource.entry((p.group, p.name())).or_default();
        verbs.extend_from_slice(p.verbs);
        verbs.sort_unstable();
        verbs.dedup();
    }
    let mut by_group_verbs: BTreeMap<(&str, Vec<&str>), Vec<String>> = BTreeMap::new();
    for ((group, resource), verbs) in by_group_resource {
        by_group_verbs.entry((group, verbs)).or_default().push(resource);
    }
    by_group_verbs
        .into_iter()
        .map(|((group, verbs), resources)| PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(resources),
            verbs: verbs.into_iter().map(str::to_owned).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// Where bosun runs when deployed from `config/` (kubebuilder's `<project>-system`).
pub const NAMESPACE: &str = "bosun-system";
pub const SERVICE_ACCOUNT: &str = "bosun-controller-manager";
pub const CLUSTER_ROLE: &str = "bosun-manager-role";

/// Every permission bosun uses: the manager's and every controller's.
pub fn all_permissions() -> Vec<Permission> {
    [MANAGER, crate::webapp::PERMISSIONS, crate::voteconfig::PERMISSIONS, crate::demovolume::PERMISSIONS].concat()
}

/// The files of `config/rbac/`: ServiceAccount, ClusterRole, ClusterRoleBinding and a
/// kustomization. Paths are relative to `config/rbac/`.
pub fn files() -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const HEADER: &str = "# Generated from the permissions declared in the code by `make manifests`. Do not edit.\n";
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_owned(), "bosun".to_owned())])),
        ..ObjectMeta::default()
    };
    let account = ServiceAccount { metadata: meta(SERVICE_ACCOUNT, Some(NAMESPACE)), ..ServiceAccount::default() };
    let role = ClusterRole {
        metadata: meta(CLUSTER_ROLE, None),
        rules: Some(rules(&all_permissions())),
        aggregation_rule: None,
    };
    let binding = ClusterRoleBinding {
        metadata: meta("bosun-manager-rolebinding", None),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: CLUSTER_ROLE.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: SERVICE_ACCOUNT.into(),
            namespace: Some(NAMESPACE.into()),
            api_group: None,
        }]),
    };
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- service_account.yaml\n- role.yaml\n- role_binding.yaml\n";
    Ok(vec![
        ("service_account.yaml".into(), format!("{HEADER}{}", serde_yaml_ng::to_string(&account)?)),
        ("role.yaml".into(), format!("{HEADER}{}", serde_yaml_ng::to_string(&role)?)),
        ("role_binding.yaml".into(), format!("{HEADER}{}", serde_yaml_ng::to_string(&binding)?)),
        ("kustomization.yaml".into(), format!("{HEADER}{kustomization}")),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_sorts_without_wildcards() {
        let perms = [
            Permission::new("apps", "deployments", &["watch", "list"]),
            Permission::new("apps", "deployments", &["create", "patch"]),
            Permission::new("", "services", OWN),
            Permission::new("apps", "statefulsets", OWN),
        ];
        let rules = rules(&perms);
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert_eq!(rules[0].api_groups, Some(vec!["".to_owned()]));
        assert_eq!(rules[1].resources, Some(vec!["deployments".to_owned(), "statefulsets".to_owned()]));
        assert_eq!(rules[1].verbs, vec!["create", "list", "patch", "watch"]);
        assert!(rules.iter().all(|r| !r.verbs.contains(&"*".to_owned())));
    }

    #[test]
    fn reconciled_kinds_get_status_and_finalizers_separately() {
        let [watch, status, finalizers] = reconciled("example.com", "webapps");
        assert_eq!(
            (watch.name(), status.name(), finalizers.name()),
            ("webapps".into(), "webapps/status".into(), "webapps/finalizers".into())
        );
        assert_eq!(status.verbs, STATUS);
    }
}
