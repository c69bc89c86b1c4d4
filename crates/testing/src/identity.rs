//! Running bosun as its own ServiceAccount with only the generated ClusterRole.
//!
//! Each test gets a ServiceAccount `bosun` in its namespace, bound to the committed
//! `config/rbac/role.yaml` ClusterRole by a ClusterRoleBinding that the namespace owns
//! (so deleting the namespace removes it), and a kubeconfig with a TokenRequest token.

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
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

/// Bind ServiceAccount `bosun` in `ns` to `cluster_role`; the binding is owned by the namespace.
pub(crate) async fn bind(client: &Client, ns: &str, cluster_role: &str) {
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
    std::fs::write(&path, serde_yaml_ng::to_string(&config).expect("kubeconfig yaml")).expect("writing kubeconfig");
    path
}
