//! Running bosun as its own ServiceAccount with only the generated roles.
//!
//! Each test gets a ServiceAccount `bosun` in its namespace, bound to the committed
//! `config/rbac/role.yaml` ClusterRole by a ClusterRoleBinding that the namespace owns
//! (so deleting the namespace removes it), and a kubeconfig with a TokenRequest token.
//!
//! Leader election is granted the way a deployment grants it in `bosun-system`: the
//! rules of the committed `config/rbac/leader_election_role.yaml` Role, as a Role and
//! RoleBinding in the test's namespace. That is where the tests' Lease lives: they pass
//! `--leader-elect-namespace=<test namespace>`, and the kubeconfig's default namespace
//! (bosun's fallback) is the test's namespace too.

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{AuthInfo, Kubeconfig, NamedAuthInfo};
use kube::{Api, Client, Resource, ResourceExt};

use crate::cluster::repo_root;

const MANAGER: &str = "bosun-e2e";

/// Apply the committed ClusterRole (not the one in the code: the file is what users deploy).
pub(crate) async fn install_cluster_role(client: &Client) -> String {
    let path = repo_root().join("config/rbac/role.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let role: ClusterRole =
        serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    let name = role.name_any();
    Api::<ClusterRole>::all(client.clone())
        .patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&role))
        .await
        .unwrap_or_else(|e| panic!("applying ClusterRole {name}: {e}"));
    name
}

/// A kubeconfig for ServiceAccount `bosun` in `ns`, bound to `cluster_role`.
pub(crate) async fn bosun_kubeconfig(
    client: &Client,
    admin: &std::path::Path,
    ns: &str,
    cluster_role: &str,
) -> PathBuf {
    let path = unbound_kubeconfig(client, admin, ns).await;
    bind(client, ns, cluster_role).await;
    path
}

/// The committed leader-election Role (not the one in the code: the file is what users deploy).
fn leader_election_role() -> Role {
    let path = repo_root().join("config/rbac/leader_election_role.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Bind ServiceAccount `bosun` in `ns` to `cluster_role` (the binding is owned by the
/// namespace) and grant it the leader-election Role's rules in `ns`.
pub(crate) async fn bind(client: &Client, ns: &str, cluster_role: &str) {
    bind_leader_election(client, ns).await;
    bind_cluster_role(client, ns, cluster_role).await;
}

/// A Role with the rules of `config/rbac/leader_election_role.yaml` and a RoleBinding
/// to ServiceAccount `bosun`, both in `ns` (deleted with it).
async fn bind_leader_election(client: &Client, ns: &str) {
    let committed = leader_election_role();
    let name = committed.name_any();
    let role: Role = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": committed.rules,
    }))
    .expect("leader-election Role");
    Api::<Role>::namespaced(client.clone(), ns)
        .patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&role))
        .await
        .unwrap_or_else(|e| panic!("creating Role {ns}/{name}: {e}"));
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": format!("{name}binding"), "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "bosun", "namespace": ns}],
    }))
    .expect("leader-election RoleBinding");
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch(&binding.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&binding))
        .await
        .unwrap_or_else(|e| panic!("binding Role {ns}/{name}: {e}"));
}

/// Bind ServiceAccount `bosun` in `ns` to `cluster_role`; the binding is owned by the namespace.
async fn bind_cluster_role(client: &Client, ns: &str, cluster_role: &str) {
    let namespace: Namespace = Api::all(client.clone()).get(ns).await.expect("test namespace");
    let owner = namespace.controller_owner_ref(&()).expect("namespace uid");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("bosun-e2e-{ns}"), "ownerReferences": [owner]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": "bosun", "namespace": ns}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&binding.name_any(), &PatchParams::apply(MANAGER).force(), &Patch::Apply(&binding))
        .await
        .expect("binding the ClusterRole");
}

/// A kubeconfig for ServiceAccount `bosun` in `ns`, which has no permissions yet.
pub(crate) async fn unbound_kubeconfig(client: &Client, admin: &std::path::Path, ns: &str) -> PathBuf {
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "bosun"}})).expect("sa");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    accounts
        .patch("bosun", &PatchParams::apply(MANAGER), &Patch::Apply(&account))
        .await
        .expect("creating ServiceAccount bosun");

    let request = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), bound_object_ref: None },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("bosun", &PostParams::default(), &request)
        .await
        .expect("TokenRequest for bosun")
        .status
        .expect("token")
        .token;

    let mut config = Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let user = "bosun".to_owned();
    config.auth_infos = vec![NamedAuthInfo {
        name: user.clone(),
        auth_info: Some(AuthInfo { token: Some(token.into()), ..AuthInfo::default() }),
        other: Default::default(),
    }];
    for context in config.contexts.iter_mut().filter_map(|c| c.context.as_mut()) {
        context.user = Some(user.clone());
        context.namespace = Some(ns.to_owned());
    }
    let path = repo_root().join("target/e2e-logs").join(format!("{ns}.kubeconfig"));
    std::fs::create_dir_all(path.parent().expect("dir")).expect("log dir");
    // Written aside and renamed: a bosun started a moment ago may be reading the one
    // this replaces (replicas started one after the other), and must never see half.
    let aside = path.with_extension(format!("kubeconfig.{}", std::process::id()));
    std::fs::write(&aside, serde_yaml_ng::to_string(&config).expect("kubeconfig yaml")).expect("writing kubeconfig");
    std::fs::rename(&aside, &path).expect("renaming the kubeconfig into place");
    path
}
