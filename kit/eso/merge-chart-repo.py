#!/usr/bin/env python3
"""Merge per-version Helm repository indexes (written by package-chart.py next
to each chart .tgz) into one repository: OUT_DIR/index.yaml listing every
version, with the .tgz files copied next to it, so one `helm repo add` (or a
Flux HelmRepository/Bucket) sees every chart version the kit holds.

usage: merge-chart-repo.py OUT_DIR INDEX_YAML...
Prints the versions, newest first.
"""
import hashlib, os, shutil, sys
import yaml

out_dir, indexes = sys.argv[1], sys.argv[2:]
os.makedirs(out_dir, exist_ok=True)
entries = {}
for path in indexes:
    with open(path) as f:
        index = yaml.safe_load(f)
    for name, versions in index["entries"].items():
        for e in versions:
            src = os.path.join(os.path.dirname(path), e["urls"][0])
            with open(src, "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != e["digest"]:
                sys.exit(f"{src}: digest does not match {path}")
            dst = os.path.join(out_dir, os.path.basename(src))
            tmp = dst + ".tmp"
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            entries.setdefault(name, []).append(dict(e, urls=[os.path.basename(src)]))

def vkey(e):
    return [int(p) if p.isdigit() else p for p in str(e["version"]).lstrip("v").replace("-", ".").split(".")]

# helm repo index lists each chart's versions newest first
for name in entries:
    entries[name].sort(key=vkey, reverse=True)
created = min(e["created"] for es in entries.values() for e in es)
tmp = os.path.join(out_dir, "index.yaml.tmp")
with open(tmp, "w") as f:
    yaml.safe_dump({"apiVersion": "v1", "entries": entries, "generated": created}, f, sort_keys=False)
os.replace(tmp, os.path.join(out_dir, "index.yaml"))
print(" ".join(str(e["version"]) for es in entries.values() for e in es))
