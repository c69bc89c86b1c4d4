//! Withdrawing what a bosun run outside the cluster pointed at its own URL, when it
//! stops (`--webhook-remove-on-exit`, which `make run` sets): the two webhook
//! configurations it created go, and the CRDs it converts point at the webhook Service
//! again, as `config/crd` ships them. Otherwise every later create of a WebApp would be
//! refused by a webhook nobody serves (`failurePolicy: Fail`), and `make deploy`'s apply
//! of a CRD naming the Service would meet the URL beside it.
//!
//! Only what points at this run's URL is touched: a deployed bosun's configurations and
//! CRDs (pointing at its Service) are left as they are. Off by default: of several
//! replicas, one that stops must not take the others' admission away.

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::{info, warn};

use bosun_api::conversion::{NAMESPACE, SERVICE, Target, client_config};

/// What to withdraw at exit: the configurations' prefix and the converted CRDs, for
/// the run serving at `url`.
#[derive(Clone)]
pub struct Withdraw {
    /// The task that keeps the configurations (and would put them back): stopped first.
    pub keeper: Option<std::sync::Arc<tokio::task::AbortHandle>>,
    pub client: Client,
    pub url: String,
    pub validating: String,
    pub mutating: String,
    pub converted: Vec<String>,
}

impl std::fmt::Debug for Withdraw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Withdraw").field("url", &self.url).field("converted", &self.converted).finish_non_exhaustive()
    }
}

impl Withdraw {
    /// Withdraw everything that points at this run's URL; what fails is logged (the
    /// next `make run` or `make install` puts it right), never an error at exit.
    pub async fn run(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.abort();
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            while !keeper.is_finished() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let urls = validating
            .get_opt(&self.validating)
            .await
            .map(|c| c.map(|c| c.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.url).collect()));
        self.configuration(&validating, &self.validating, urls).await;
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let urls = mutating
            .get_opt(&self.mutating)
            .await
            .map(|c| c.map(|c| c.webhooks.unwrap_or_default().into_iter().map(|w| w.client_config.url).collect()));
        self.configuration(&mutating, &self.mutating, urls).await;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for name in &self.converted {
            match crds.get_opt(name).await {
                Ok(Some(crd)) if points_at(&crd, &self.url) => {
                    let shipped = client_config(
                        &Target::Service { namespace: NAMESPACE.to_owned(), name: SERVICE.to_owned() },
                        None,
                    );
                    let patch = json!({"spec": {"conversion": {"webhook": {"clientConfig": {
                        "service": shipped.service, "url": null, "caBundle": null,
                    }}}}});
                    match crds.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Ok(_) => info!(crd = %name, "conversion pointed at the webhook Service again, as shipped"),
                        Err(e) => warn!(crd = %name, error = %e, "conversion not withdrawn"),
                    }
                }
                Ok(_) => {}
                Err(e) => warn!(crd = %name, error = %e, "conversion not withdrawn"),
            }
        }
    }

    /// Delete the configuration `name` when its webhooks' `urls` (as read) are this run's.
    async fn configuration<K>(&self, api: &Api<K>, name: &str, urls: Result<Option<Vec<Option<String>>>, kube::Error>)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let ours = match urls {
            Ok(urls) => urls.unwrap_or_default().iter().flatten().any(|u| u.starts_with(&self.url)),
            Err(e) => {
                warn!(configuration = %name, error = %e, "not withdrawn");
                false
            }
        };
        if !ours {
            return;
        }
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => info!(configuration = %name, url = %self.url, "webhook configuration withdrawn"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => warn!(configuration = %name, error = %e, "not withdrawn"),
        }
    }
}

/// Whether `crd`'s conversion webhook is reached at `url`.
fn points_at(crd: &CustomResourceDefinition, url: &str) -> bool {
    let config = crd.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref()).and_then(|w| w.client_config.as_ref());
    config.and_then(|c| c.url.as_deref()).is_some_and(|u| u.starts_with(url))
}
