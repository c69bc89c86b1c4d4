//! bosun's custom resources.
//!
//! Every type here is the contract of `../shared/spec/operators.md`: group, kind and
//! field names are fixed. The CRD YAML committed under `config/crd/` is generated
//! from these types (`bosun crd`, `make manifests`) and a test fails when it drifts.

pub mod conditions;
pub mod webapp;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD bosun serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![webapp::apps_v1::WebApp::crd(), webapp::example_v1::WebApp::crd()]
}

/// The CRDs as one multi-document YAML stream, exactly as committed under `config/crd/`.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}
