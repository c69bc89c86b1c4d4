//! The RBAC committed under `config/rbac/` is exactly what the code declares.

use std::path::Path;

#[test]
fn committed_rbac_matches_the_declared_permissions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/rbac");
    for (path, yaml) in bosun_controller::rbac::files().unwrap() {
        let committed = std::fs::read_to_string(dir.join(&path))
            .unwrap_or_else(|e| panic!("config/rbac/{path} is missing ({e}); run `make manifests` and commit"));
        assert!(
            committed == yaml,
            "config/rbac/{path} differs from the code's permissions; run `make manifests` and commit"
        );
    }
}

#[test]
fn the_cluster_role_has_no_wildcards() {
    let role = bosun_controller::rbac::rules(&bosun_controller::rbac::all_permissions());
    for rule in role {
        let everything =
            rule.verbs.iter().chain(rule.resources.iter().flatten()).chain(rule.api_groups.iter().flatten());
        for word in everything {
            assert_ne!(word, "*", "wildcard in {rule:?}");
        }
    }
}
