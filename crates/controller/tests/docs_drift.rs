//! The user documentation under `docs/`: a page per kind whose reference blocks are
//! exactly what the CRDs generate, whose sample is the one under `config/samples/` (which
//! an end-to-end test applies), with prose around them, and linked from the README.

use std::path::Path;

#[test]
fn every_kind_has_a_page_whose_reference_matches_the_crd() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let index = std::fs::read_to_string(root.join("docs/README.md")).expect("docs/README.md, the index of the pages");
    for (path, expected) in
        bosun_api::docs::pages(&bosun_controller::kinds::crds(), &root.join("docs"), &root.join("config/samples"))
            .unwrap()
    {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("docs/{name} is missing ({e}); run `make manifests`, write its prose, commit"));
        assert!(
            committed == expected,
            "docs/{name} differs from the CRD or its sample; run `make manifests` and commit"
        );
        for section in ["## What it does", "## Status and conditions", "## Fields", "## Sample"] {
            let prose = committed.split(section).nth(1).map(|rest| rest.split("\n## ").next().unwrap_or(""));
            assert!(
                prose.is_some_and(|p| p.trim().len() > 40),
                "docs/{name} needs a section `{section}` with something in it"
            );
        }
        assert!(index.contains(&format!("({name})")), "docs/README.md does not link docs/{name}");
    }
    assert!(readme.contains("docs/README.md"), "the README does not send readers to docs/README.md");
}
