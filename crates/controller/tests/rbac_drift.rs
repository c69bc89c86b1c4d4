//! The RBAC committed under `config/rbac/` is exactly what the code declares.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn committed_rbac_matches_the_declared_permissions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac");
    let files = bosun_controller::rbac::files().unwrap();
    for (path, yaml) in &files {
        let committed = std::fs::read_to_string(dir.join(path))
            .unwrap_or_else(|e| panic!("config/rbac/{path} is missing ({e}); run `make manifests` and commit"));
        assert!(
            committed == *yaml,
            "config/rbac/{path} differs from the code's permissions; run `make manifests` and commit"
        );
    }
    let generated: BTreeSet<_> = files.iter().map(|(p, _)| p.clone()).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(generated.contains(&name), "config/rbac/{name} is not generated from the code; remove it");
    }
}

#[test]
fn no_role_has_wildcards() {
    let role = bosun_controller::permissions::rules(&bosun_controller::rbac::all_permissions());
    for rule in role {
        let everything =
            rule.verbs.iter().chain(rule.resources.iter().flatten()).chain(rule.api_groups.iter().flatten());
        for word in everything {
            assert_ne!(word, "*", "wildcard in {rule:?}");
        }
    }
}

#[test]
fn leases_are_granted_only_in_bosuns_namespace() {
    let cluster = bosun_controller::permissions::rules(&bosun_controller::rbac::cluster_permissions());
    assert!(
        cluster.iter().all(|r| r.api_groups.iter().flatten().all(|g| g != "coordination.k8s.io")),
        "the ClusterRole grants leases: {cluster:?}"
    );
    let namespaced = bosun_controller::permissions::rules(&bosun_controller::rbac::namespaced_permissions());
    assert!(
        namespaced.iter().any(|r| r.resources.iter().flatten().any(|res| res == "leases")),
        "the leader-election Role does not grant leases: {namespaced:?}"
    );
}
