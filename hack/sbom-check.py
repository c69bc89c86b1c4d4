"""Checks bosun's SBOM (hack/sbom.sh): valid CycloneDX 1.5 (the strict JSON schema of
cyclonedx-python-lib), and complete: every crate of Cargo.lock that the bosun package
depends on, through normal and build dependencies on any platform, is a component.

Usage: sbom-check.py SBOM METADATA_JSON CARGO_LOCK
"""

import json
import sys
import tomllib

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator


def main(sbom_path: str, metadata_path: str, lock_path: str) -> int:
    text = open(sbom_path, encoding="utf-8").read()
    errors = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    if errors is not None:
        error = errors.data
        where = "/".join(str(p) for p in getattr(error, "absolute_path", []))
        print(f"{sbom_path}: not valid CycloneDX 1.5 at /{where}: {getattr(error, 'message', error)}", file=sys.stderr)
        return 1
    sbom = json.loads(text)

    def walk(components):
        for c in components:
            yield c
            yield from walk(c.get("components", []))

    listed = {(c["name"], c.get("version")) for c in walk(sbom.get("components", []))}
    top = sbom["metadata"]["component"]
    listed.add((top["name"], top.get("version")))

    metadata = json.load(open(metadata_path, encoding="utf-8"))
    packages = {p["id"]: (p["name"], p["version"]) for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next(i for i, (name, _) in packages.items() if name == "bosun" and i in nodes)
    needed, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        if node["id"] in needed:
            continue
        needed.add(node["id"])
        for dep in node["deps"]:
            if any(k["kind"] != "dev" for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    wanted = {packages[i] for i in needed}
    missing = sorted(wanted - listed)
    if missing:
        print(f"{sbom_path}: crates bosun is built from but not listed: {missing}", file=sys.stderr)
        return 1

    with open(lock_path, "rb") as f:
        locked = {(p["name"], p["version"]) for p in tomllib.load(f)["package"]}
    others = sorted(locked - wanted)
    print(
        f"{sbom_path}: valid CycloneDX {sbom['specVersion']}; {len(listed) - 1} components, "
        f"every one of the {len(wanted) - 1} crates bosun is built from ({len(locked)} in Cargo.lock; "
        f"the others are dev-only or other workspace members': {', '.join(n for n, _ in others)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
