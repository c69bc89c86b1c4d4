//! The permissions bosun uses, declared next to the code that uses them, and the
//! least-privilege RBAC generated from them (`make manifests` → `config/rbac/`).
//!
//! Each controller module exports `PERMISSIONS`; the manager adds what it needs itself:
//! events, in every namespace it serves ([`MANAGER`], in the ClusterRole), and the
//! leader Lease, only in its own namespace ([`LEADER_ELECTION`], in a Role there, as
//! kubebuilder lays it out). The e2e tests run bosun with exactly the generated roles,
//! so a permission missing here fails them.

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

/// A kind bosun reconciles: watched (a reconcile reads it from the cache).
pub const RECONCILED: &[&str] = &["list", "watch"];
/// Watching and server-side applying a child (`create` for an apply that creates it;
/// `get` for its metadata when an apply finds the name taken by an object the watch,
/// filtered on bosun's label, does not see).
pub const OWN: &[&str] = &["create", "get", "list", "patch", "watch"];
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

/// What the manager itself needs in every namespace it serves: events on the
/// resources (written in the namespace of the object they are about).
pub const MANAGER: &[Permission] = &[Permission::new("events.k8s.io", "events", &["create", "patch"])];

/// What leader election needs, granted only in bosun's own namespace by a Role: the
/// leader Lease. kube-lease-manager 0.13 reads it (`get`), creates it when missing and
/// renews, takes over and releases it with patches (no list, watch, update or delete).
pub const LEADER_ELECTION: &[Permission] =
    &[Permission::new("coordination.k8s.io", "leases", &["create", "get", "patch"])];

/// What the admission webhooks need cluster-wide: the two configurations (created with
/// `--webhook-url`, their CA bundle kept right either way, watched to put it back) and
/// namespaces' labels (`productionNamespaceSelector`).
pub const WEBHOOKS: &[Permission] = &[
    Permission::new(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        &["create", "get", "list", "patch", "watch"],
    ),
    Permission::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        &["create", "get", "list", "patch", "watch"],
    ),
    Permission::new("", "namespaces", &["list", "watch"]),
];

/// The verbs the webhooks use on the Secret of the self-managed CA and certificate in
/// bosun's own namespace: watched, created when missing, replaced only with the
/// resourceVersion read.
pub const WEBHOOK_SECRET_VERBS: &[&str] = &["create", "get", "list", "update", "watch"];

/// What the webhooks need in bosun's own namespace beyond what the ClusterRole already
/// grants on Secrets everywhere (PostgreSQL's credentials: create, get, list, watch):
/// `update`, to replace the certificate Secret. A test checks that the two together
/// cover [`WEBHOOK_SECRET_VERBS`].
pub const WEBHOOK_CERTIFICATES: &[Permission] = &[Permission::new("", "secrets", &["update"])];

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
pub const CLUSTER_ROLE_BINDING: &str = "bosun-manager-rolebinding";
/// The Role (in [`NAMESPACE`]) with the [`LEADER_ELECTION`] permissions.
pub const LEADER_ELECTION_ROLE: &str = "bosun-leader-election-role";
pub const LEADER_ELECTION_ROLE_BINDING: &str = "bosun-leader-election-rolebinding";

/// The permissions of the ClusterRole: the manager's and every controller's, in every
/// namespace bosun serves.
pub fn cluster_permissions() -> Vec<Permission> {
    [
        MANAGER,
        crate::webapp::PERMISSIONS,
        crate::voteconfig::PERMISSIONS,
        crate::demovolume::PERMISSIONS,
        crate::appconfig::PERMISSIONS,
        crate::backup::PERMISSIONS,
        crate::restore::PERMISSIONS,
        crate::postgresql::PERMISSIONS,
        crate::stacks::PERMISSIONS,
        WEBHOOKS,
    ]
    .concat()
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

    #[test]
    fn merges_and_sorts_without_wildcards() {
        let perms = [
            Permission::new("apps", "deployments", &["watch", "list"]),
            Permission::new("apps", "deployments", &["create", "get", "patch"]),
            Permission::new("", "services", OWN),
            Permission::new("apps", "statefulsets", OWN),
        ];
        let rules = rules(&perms);
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert_eq!(rules[0].api_groups, Some(vec!["".to_owned()]));
        assert_eq!(rules[1].resources, Some(vec!["deployments".to_owned(), "statefulsets".to_owned()]));
        assert_eq!(rules[1].verbs, vec!["create", "get", "list", "patch", "watch"]);
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
                    vec!["create".to_owned(), "get".to_owned(), "patch".to_owned()]
                ),
            ]
        );
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
