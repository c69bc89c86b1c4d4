//! The webhook configuration committed under `config/webhook/` is exactly what the code builds.

use std::path::Path;

#[test]
fn committed_webhook_configuration_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/webhook");
    for (path, yaml) in bosun_runtime::webhook::files().unwrap() {
        let committed = std::fs::read_to_string(dir.join(&path))
            .unwrap_or_else(|e| panic!("config/webhook/{path} is missing ({e}); run `make manifests` and commit"));
        assert!(committed == yaml, "config/webhook/{path} differs from the code; run `make manifests` and commit");
    }
}
