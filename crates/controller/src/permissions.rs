//! The permissions bosun uses, declared next to the code that uses them: each
//! controller module's `PERMISSIONS` (in its [`crate::kinds::Served`]), and what the
//! manager needs itself: events, in every namespace it serves ([`MANAGER`]), and the
//! leader Lease, only in its own namespace ([`LEADER_ELECTION`]). [`crate::rbac`]
//! generates the least-privilege RBAC from them.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::PolicyRule;

/// Verbs on one resource (or one of its subresources) of one API group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<&'static str>,
    pub verbs: &'static [&'static str],
    /// Only these objects (RBAC's `resourceNames`); empty: all of them.
    pub names: &'static [&'static str],
}

impl Permission {
    pub const fn new(group: &'static str, resource: &'static str, verbs: &'static [&'static str]) -> Self {
        Self { group, resource, subresource: None, verbs, names: &[] }
    }

    pub const fn sub(
        group: &'static str,
        resource: &'static str,
        sub: &'static str,
        verbs: &'static [&'static str],
    ) -> Self {
        Self { group, resource, subresource: Some(sub), verbs, names: &[] }
    }

    /// The same verbs, on the objects named `names` only.
    pub const fn named(self, names: &'static [&'static str]) -> Self {
        Self { names, ..self }
    }

    /// `resource` or `resource/subresource`, as RBAC spells it.
    pub fn name(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_owned(),
        }
    }
}

/// A kind bosun reconciles: watched (a reconcile reads it from the cache), and with
/// `--shards` its shard label (`bosun.dev/bucket`) patched onto an object without one.
pub const RECONCILED: &[&str] = &["list", "patch", "watch"];
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
/// renews, takes over and releases it with patches. With `--shards`, the replicas list
/// the Leases to see one another and delete the member Leases of replicas long gone.
pub const LEADER_ELECTION: &[Permission] =
    &[Permission::new("coordination.k8s.io", "leases", &["create", "delete", "get", "list", "patch"])];

/// The checkpoints of bosun's apply records ([`crate::checkpoint`]), ConfigMaps in its
/// own namespace: listed by label at start, written with server-side apply (which
/// creates them the first time). Declared, not granted on their own: the ClusterRole's
/// ConfigMap verbs already cover bosun's namespace (a test holds that).
pub const CHECKPOINTS: &[Permission] = &[Permission::new("", "configmaps", &["create", "list", "patch"])];

/// What the admission webhooks need cluster-wide: the two configurations (created with
/// `--webhook-url` and deleted at exit with `--webhook-remove-on-exit`, their CA bundle
/// kept right either way, watched to put it back) and namespaces' labels
/// (`productionNamespaceSelector`). `delete` adds nothing to what `patch` of them
/// already allows.
pub const WEBHOOKS: &[Permission] = &[
    Permission::new(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        &["create", "delete", "get", "list", "patch", "watch"],
    ),
    Permission::new(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        &["create", "delete", "get", "list", "patch", "watch"],
    ),
    Permission::new("", "namespaces", &["list", "watch"]),
];

/// What the conversion webhook needs: the CRDs of the kinds it converts (their client
/// configuration and CA bundle kept right and watched, and `status.storedVersions`
/// trimmed once every object was rewritten in the storage version) and `update` on
/// those kinds, for that rewrite. A test checks the names against the CRDs.
pub const CONVERSION: &[Permission] = &[
    // Watched (by name) with the list and watch every CRD may have (ServiceMonitor's presence).
    Permission::new("apiextensions.k8s.io", "customresourcedefinitions", &["get", "patch"]).named(CONVERTED_CRDS),
    Permission::sub("apiextensions.k8s.io", "customresourcedefinitions", "status", &["patch"]).named(CONVERTED_CRDS),
    Permission::new("voting.schoolofdevops.com", "voteconfigs", &["update"]),
];

/// The CRDs whose versions bosun's webhook converts.
pub const CONVERTED_CRDS: &[&str] = &["voteconfigs.voting.schoolofdevops.com"];

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
    let mut by_group_resource: BTreeMap<(&str, String, &[&str]), Vec<&str>> = BTreeMap::new();
    for p in permissions {
        let verbs = by_group_resource.entry((p.group, p.name(), p.names)).or_default();
        verbs.extend_from_slice(p.verbs);
        verbs.sort_unstable();
        verbs.dedup();
    }
    // One rule per API group, verbs and resource names.
    type Rule<'a> = (&'a str, Vec<&'a str>, &'a [&'a str]);
    let mut by_group_verbs: BTreeMap<Rule, Vec<String>> = BTreeMap::new();
    for ((group, resource, names), verbs) in by_group_resource {
        by_group_verbs.entry((group, verbs, names)).or_default().push(resource);
    }
    by_group_verbs
        .into_iter()
        .map(|((group, verbs, names), resources)| PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(resources),
            resource_names: (!names.is_empty()).then(|| names.iter().map(|n| (*n).to_owned()).collect()),
            verbs: verbs.into_iter().map(str::to_owned).collect(),
            ..PolicyRule::default()
        })
        .collect()
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
    fn named_permissions_get_rules_of_their_own() {
        let perms = [
            Permission::new("apiextensions.k8s.io", "customresourcedefinitions", &["list", "watch"]),
            Permission::new("apiextensions.k8s.io", "customresourcedefinitions", &["get", "patch"]).named(&["a.b.c"]),
        ];
        let rules = rules(&perms);
        assert_eq!(rules.len(), 2, "{rules:?}");
        let named = rules.iter().find(|r| r.resource_names.is_some()).unwrap();
        assert_eq!(named.resource_names, Some(vec!["a.b.c".to_owned()]));
        assert_eq!(named.verbs, vec!["get", "patch"]);
        let all = rules.iter().find(|r| r.resource_names.is_none()).unwrap();
        assert_eq!(all.verbs, vec!["list", "watch"]);
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
