#!/usr/bin/env python3
"""Writes an OCI image layout archive (what `ctr images import` takes) from a
root filesystem tarball, for hack/images.sh. Standard library only.

  oci.py --ref NAME --config JSON --out IMAGE.tar
         [--rootfs ROOTFS.tar] [--file SRC=DEST[:MODE]]... [--base BASE-IMAGE.tar [--additive]]

The image gets one new, uncompressed layer (uncompressed because that is what
unpacks fastest into a local containerd). Without --base the layer is the whole
root filesystem (ROOTFS.tar plus the --file additions). With --base, the image
is BASE-IMAGE.tar's layers (reused byte for byte, so containerd stores and
unpacks them once for every image built on them) plus a layer holding only what
differs between the base's file system and ROOTFS.tar: new and changed entries,
and whiteouts for removed ones. ROOTFS.tar must then be the complete file
system of the new image (what `mmdebstrap` wrote), not just the additions —
unless --additive is given: then the new layer holds only the --file (and
ROOTFS.tar) entries, over an unchanged base (how a binary is put on top of an
image).

--config is the image config's "config" object in the Docker/OCI spelling
(Entrypoint, Cmd, Env, User, WorkingDir, StopSignal, Labels), except that
ExposedPorts and Volumes may be given as plain lists.

Entries are normalised on the way: no leading "./", no root entry, numeric
owners only, nothing below /dev (the runtime mounts its own), extended
attributes kept, mtimes clamped to SOURCE_DATE_EPOCH when it is set.
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile

CHUNK = 1 << 20
LAYER_MT = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MT = "application/vnd.oci.image.config.v1+json"
INDEX_MT = "application/vnd.oci.image.index.v1+json"
WHITEOUT = ".wh."


def norm(name):
    while name.startswith("./"):
        name = name[2:]
    name = name.lstrip("/").rstrip("/")
    return "" if name == "." else name


def keep(name):
    return name != "" and not name.startswith("dev/")


def xattrs(ti):
    return {k: v for k, v in ti.pax_headers.items() if k.startswith("SCHILY.xattr.")}


class HashingWriter:
    """File wrapper that hashes what goes through it (tarfile needs tell())."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def write(self, b):
        self.h.update(b)
        self.n += len(b)
        return self.f.write(b)

    def tell(self):
        return self.n


def file_digest(f):
    h = hashlib.sha256()
    while True:
        b = f.read(CHUNK)
        if not b:
            return h.hexdigest()
        h.update(b)


class Tree:
    """The entries of a file system tarball, by normalised path, with what is
    needed to compare them: kind, mode, owner, link target, content hash."""

    def __init__(self):
        # path -> (TarInfo, source: TarFile, or a path for --file additions,
        #          or None for directories made up here; content hash or None)
        self.entries = {}

    def add_tar(self, tf):
        for ti in tf:
            name = norm(ti.name)
            if not keep(name):
                continue
            if os.path.basename(name).startswith(WHITEOUT):
                self.whiteout(name)
                continue
            digest = None
            if ti.isreg():
                digest = file_digest(tf.extractfile(ti))
            if ti.islnk():
                ti.linkname = norm(ti.linkname)
            if name in self.entries and self.entries[name][0].isdir() and not ti.isdir():
                self.remove(name)
            self.entries[name] = (ti, tf, digest)

    def whiteout(self, name):
        d, base = os.path.split(name)
        if base == WHITEOUT + WHITEOUT + ".opq":
            self.remove(d, keep_self=True)
        else:
            self.remove(os.path.join(d, base[len(WHITEOUT):]))

    def remove(self, name, keep_self=False):
        prefix = name + "/"
        for p in [p for p in self.entries if p.startswith(prefix) or (p == name and not keep_self)]:
            del self.entries[p]

    def resolved(self, name):
        """The entry, with a hard link replaced by what it points to."""
        ti, tf, digest = self.entries[name]
        seen = 0
        while ti.islnk() and ti.linkname in self.entries and seen < 64:
            ti, tf, digest = self.entries[ti.linkname]
            seen += 1
        return ti, tf, digest

    def signature(self, name):
        ti, _, digest = self.resolved(name)
        return (ti.type if not ti.isreg() else tarfile.REGTYPE, ti.mode & 0o7777, ti.uid, ti.gid,
                ti.linkname if ti.issym() else "", digest, ti.devmajor, ti.devminor,
                tuple(sorted(xattrs(ti).items())))


def write_layer(out, tree, base=None, epoch=None, additive=False):
    """Writes the layer tar to `out` (a file) and returns its sha256 hex digest:
    all of `tree`, or, with a base Tree, what it takes to turn base into tree."""
    hw = HashingWriter(out)
    emitted = set()
    with tarfile.open(fileobj=hw, mode="w", format=tarfile.PAX_FORMAT) as lt:
        for name in tree.entries:  # insertion order: parents before children
            if base is not None and name in base.entries and base.signature(name) == tree.signature(name):
                continue
            ti, tf, _ = tree.entries[name]
            if ti.islnk() and ti.linkname not in emitted:
                # The link's target is in a lower layer (or unchanged): a hard
                # link across layers is not portable, so copy the content.
                ti, tf, _ = tree.resolved(name)
            new = tarfile.TarInfo(name)
            new.type = ti.type if not ti.isreg() else tarfile.REGTYPE
            new.mode, new.uid, new.gid = ti.mode & 0o7777, ti.uid, ti.gid
            new.uname = new.gname = ""
            new.mtime = min(ti.mtime, epoch) if epoch is not None else ti.mtime
            new.linkname = ti.linkname if (ti.issym() or ti.islnk()) else ""
            new.devmajor, new.devminor = ti.devmajor, ti.devminor
            new.pax_headers = xattrs(ti)
            if new.isreg():
                new.size = ti.size
                if isinstance(tf, str):  # a --file addition: tf is its path
                    with open(tf, "rb") as src:
                        lt.addfile(new, src)
                else:
                    lt.addfile(new, tf.extractfile(ti))
            else:
                new.size = 0
                lt.addfile(new)
            emitted.add(name)
        if base is not None and not additive:
            removed = [p for p in base.entries if p not in tree.entries]
            gone = set(removed)
            for p in removed:
                parent = os.path.dirname(p)
                if parent in gone or (parent and not (parent in tree.entries and tree.entries[parent][0].isdir())):
                    continue  # covered by the parent's whiteout or replacement
                wh = tarfile.TarInfo(os.path.join(parent, WHITEOUT + os.path.basename(p)))
                wh.mtime = epoch if epoch is not None else 0
                lt.addfile(wh)
    return hw.h.hexdigest()


def add_file(tree, spec, epoch):
    src, _, dest = spec.partition("=")
    dest, _, mode = dest.partition(":")
    st = os.stat(src)
    ti = tarfile.TarInfo(norm(dest))
    ti.type, ti.size = tarfile.REGTYPE, st.st_size
    ti.mode = int(mode, 8) if mode else st.st_mode & 0o7777
    ti.mtime = int(epoch if epoch is not None else st.st_mtime)
    with open(src, "rb") as f:
        digest = file_digest(f)
    # Missing parent directories: root-owned, 0755.
    parts = ti.name.split("/")
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if d not in tree.entries:
            dti = tarfile.TarInfo(d)
            dti.type, dti.mode, dti.mtime = tarfile.DIRTYPE, 0o755, ti.mtime
            tree.entries[d] = (dti, None, None)
    tree.entries.pop(ti.name, None)
    tree.entries[ti.name] = (ti, src, digest)


def read_base(path):
    """The base image's layer blobs (descriptor, archive member) and config."""
    arch = tarfile.open(path)
    members = {norm(m.name): m for m in arch.getmembers()}

    def blob(digest):
        return arch.extractfile(members["blobs/sha256/" + digest.split(":", 1)[1]])

    index = json.load(arch.extractfile(members["index.json"]))
    manifest = json.load(blob(index["manifests"][0]["digest"]))
    config = json.load(blob(manifest["config"]["digest"]))
    layers = [(d, members["blobs/sha256/" + d["digest"].split(":", 1)[1]]) for d in manifest["layers"]]
    return arch, layers, config


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="image name, e.g. localhost/redis:7")
    ap.add_argument("--config", required=True, help="JSON object: Entrypoint, Cmd, Env, ...")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rootfs")
    ap.add_argument("--file", action="append", default=[], help="SRC=DEST[:OCTAL-MODE]")
    ap.add_argument("--base")
    ap.add_argument("--additive", action="store_true", help="with --base: add the entries, remove nothing")
    args = ap.parse_args()
    epoch = int(os.environ["SOURCE_DATE_EPOCH"]) if os.environ.get("SOURCE_DATE_EPOCH") else None

    tree = Tree()
    rootfs = tarfile.open(args.rootfs) if args.rootfs else None
    if rootfs:
        tree.add_tar(rootfs)
    for spec in args.file:
        add_file(tree, spec, epoch)

    base_layers, base_diff_ids, base_tree, base_arch = [], [], None, None
    if args.base:
        base_arch, base_layers, base_config = read_base(args.base)
        base_diff_ids = base_config["rootfs"]["diff_ids"]
        base_tree = Tree()
        for _, member in base_layers:
            base_tree.add_tar(tarfile.open(fileobj=base_arch.extractfile(member)))

    outdir = os.path.dirname(os.path.abspath(args.out))
    with tempfile.TemporaryFile(dir=outdir) as layer:
        layer_digest = write_layer(layer, tree, base_tree, epoch, args.additive)
        layer_size = layer.tell()

        cfg = json.loads(args.config)
        for key in ("ExposedPorts", "Volumes"):
            if isinstance(cfg.get(key), list):
                cfg[key] = {v: {} for v in cfg[key]}
        created = "1970-01-01T00:00:00Z"
        config = {
            "created": created,
            "architecture": "amd64",
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": base_diff_ids + ["sha256:" + layer_digest]},
            "history": [{"created": created, "created_by": "hack/images.sh (base layer)"} for _ in base_layers]
            + [{"created": created, "created_by": "hack/images.sh"}],
        }
        config_b = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
        layers = [d for d, _ in base_layers] + [{"mediaType": LAYER_MT, "digest": "sha256:" + layer_digest, "size": layer_size}]
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MT,
            "config": {"mediaType": CONFIG_MT, "digest": "sha256:" + hashlib.sha256(config_b).hexdigest(), "size": len(config_b)},
            "layers": layers,
        }
        manifest_b = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_MT,
            "manifests": [{
                "mediaType": MANIFEST_MT,
                "digest": "sha256:" + hashlib.sha256(manifest_b).hexdigest(),
                "size": len(manifest_b),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {"org.opencontainers.image.ref.name": args.ref},
            }],
        }
        index_b = json.dumps(index, sort_keys=True, separators=(",", ":")).encode()

        def entry(out, name, size, fileobj):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = size, 0o644, epoch or 0
            out.addfile(ti, fileobj)

        with open(args.out, "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as out:
            layout = b'{"imageLayoutVersion":"1.0.0"}'
            entry(out, "oci-layout", len(layout), io.BytesIO(layout))
            # First, so that reading the digest does not scan the whole archive.
            entry(out, "index.json", len(index_b), io.BytesIO(index_b))
            for d, member in base_layers:
                entry(out, "blobs/sha256/" + d["digest"].split(":", 1)[1], d["size"], base_arch.extractfile(member))
            layer.seek(0)
            entry(out, "blobs/sha256/" + layer_digest, layer_size, layer)
            for b in (config_b, manifest_b):
                entry(out, "blobs/sha256/" + hashlib.sha256(b).hexdigest(), len(b), io.BytesIO(b))
    print(json.dumps({"ref": args.ref, "manifest": index["manifests"][0]["digest"],
                      "layer_bytes": layer_size, "layers": len(layers)}))


if __name__ == "__main__":
    sys.exit(main())
