//! bosun's custom resources.
//!
//! Every type here is the contract of `../shared/spec/operators.md`: group, kind and
//! field names are fixed. The CRD YAML committed under `config/crd/` is generated
//! from these types (`bosun crd`, `make manifests`) and a test fails when it drifts.

pub mod appconfig;
pub mod backup;
pub mod conditions;
pub mod conversion;
pub mod demovolume;
pub mod docs;
pub mod monitoring;
pub mod postgresql;
pub mod schema;
pub mod stack;
pub mod voteconfig;
pub mod webapp;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CRDs as one multi-document YAML stream.
pub fn crds_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(crd)?);
    }
    Ok(out)
}

/// The files of `config/crd/` in the kustomize layout kubebuilder users know:
/// `bases/<group>_<plural>.yaml`, one CRD each, and a `kustomization.yaml` listing them.
/// Paths are relative to `config/crd/`.
pub fn crd_files(crds: &[CustomResourceDefinition]) -> Result<Vec<(String, String)>, serde_yaml_ng::Error> {
    const HEADER: &str =
        "# Generated from the Rust types by `make manifests` (bosun crd --out-dir config/crd). Do not edit.\n";
    let mut files = Vec::new();
    let mut kustomization =
        format!("{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n");
    for crd in crds {
        let path = format!("bases/{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        kustomization.push_str(&format!("- {path}\n"));
        files.push((path, format!("{HEADER}{}", serde_yaml_ng::to_string(crd)?)));
    }
    files.push(("kustomization.yaml".to_owned(), kustomization));
    Ok(files)
}
