//! The object store behind a [`Destination`], configured the way each provider's
//! own tools are: credentials only from the standard environment variables or files
//! (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_REGION`,
//! `GOOGLE_APPLICATION_CREDENTIALS`/`GOOGLE_SERVICE_ACCOUNT`,
//! `AZURE_STORAGE_ACCOUNT_NAME`/`AZURE_STORAGE_ACCOUNT_KEY`, …), never from flags.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use crate::Error;
use crate::location::{Destination, StoreKind};

/// An open destination: the store and the prefix every key lives under.
#[derive(Debug, Clone)]
pub struct Store {
    pub objects: Arc<dyn ObjectStore>,
    pub destination: Destination,
}

/// Where to reach a provider other than its public endpoint (an S3-compatible
/// server, an emulator), and the region when the environment does not say.
#[derive(Debug, Clone, Default)]
pub struct Endpoint {
    pub url: Option<String>,
    pub region: Option<String>,
}

impl Store {
    pub fn open(destination: &Destination, endpoint: &Endpoint) -> Result<Self, Error> {
        let storage = |e: object_store::Error| Error::Storage { step: "configuring the destination", source: e };
        let url = endpoint.url.as_deref();
        let http = url.is_some_and(|u| u.starts_with("http://"));
        let objects: Arc<dyn ObjectStore> = match destination.kind {
            StoreKind::S3 => {
                let mut b = AmazonS3Builder::from_env().with_bucket_name(&destination.bucket);
                if let Some(url) = url {
                    b = b.with_endpoint(url).with_allow_http(http);
                }
                if let Some(region) = &endpoint.region {
                    b = b.with_region(region);
                }
                Arc::new(b.build().map_err(storage)?)
            }
            StoreKind::Gcs => {
                let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(&destination.bucket);
                if let Some(url) = url {
                    b = b
                        .with_base_url(url)
                        .with_client_options(object_store::ClientOptions::new().with_allow_http(http));
                    // An emulator takes no credentials; asking the metadata server for
                    // some would leave the machine.
                    if !has_any_env(&[
                        "GOOGLE_SERVICE_ACCOUNT",
                        "GOOGLE_SERVICE_ACCOUNT_PATH",
                        "GOOGLE_SERVICE_ACCOUNT_KEY",
                        "GOOGLE_APPLICATION_CREDENTIALS",
                    ]) {
                        b = b.with_skip_signature(true);
                    }
                }
                Arc::new(b.build().map_err(storage)?)
            }
            StoreKind::Azure => {
                let mut b = MicrosoftAzureBuilder::from_env().with_container_name(&destination.bucket);
                if let Some(url) = url {
                    // The account URL (`http://127.0.0.1:10000/devstoreaccount1` for Azurite).
                    // An explicit endpoint wins over AZURE_STORAGE_USE_EMULATOR, whose
                    // emulator mode would silently send everything to
                    // AZURITE_BLOB_STORAGE_URL (or 127.0.0.1:10000) instead.
                    b = b.with_endpoint(url.to_owned()).with_allow_http(http).with_use_emulator(false);
                }
                Arc::new(b.build().map_err(storage)?)
            }
            StoreKind::File => {
                std::fs::create_dir_all(&destination.bucket).map_err(|e| Error::Storage {
                    step: "creating the destination directory",
                    source: object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(e) },
                })?;
                Arc::new(
                    LocalFileSystem::new_with_prefix(&destination.bucket)
                        .map_err(storage)?
                        .with_automatic_cleanup(true),
                )
            }
        };
        Ok(Store { objects, destination: destination.clone() })
    }

    /// The store path of `key` (relative to the destination's prefix).
    pub fn path(&self, key: &str) -> Path {
        if self.destination.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.destination.prefix))
        }
    }

    /// `key` as a person finds it in the bucket: with the destination's prefix.
    pub fn full_key(&self, key: &str) -> String {
        self.path(key).to_string()
    }
}

fn has_any_env(names: &[&str]) -> bool {
    names.iter().any(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()))
}
