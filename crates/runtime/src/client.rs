//! The Kubernetes client bosun uses, counting its own requests.
//!
//! `bosun_kube_requests_total{method}` is how many requests bosun sent, by HTTP method
//! (bounded: GET, POST, PATCH, PUT, DELETE, other): the cost of convergence, and
//! proof that steady state is quiet.

use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::util::MapRequestLayer;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: &'static str,
}

/// Requests sent to the API server, by method.
pub type Requests = Family<MethodLabels, Counter>;

pub fn register(requests: &Requests, registry: &mut Registry) {
    registry.register("bosun_kube_requests", "Requests bosun sent to the Kubernetes API, by method", requests.clone());
}

fn method(m: &axum::http::Method) -> &'static str {
    match m.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PATCH" => "PATCH",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        _ => "other",
    }
}

/// A client from the environment (KUBECONFIG, or in-cluster) that counts its requests.
pub async fn counted(requests: Requests) -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    let count = MapRequestLayer::new(move |req: axum::http::Request<Body>| {
        requests.get_or_create(&MethodLabels { method: method(req.method()) }).inc();
        req
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
}
