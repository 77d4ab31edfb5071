#!/usr/bin/env python3
"""Package a Helm chart directory as NAME-VERSION.tgz and write a Helm
repository index.yaml next to it, the way `helm package` + `helm repo index`
lay them out (Chart.yaml first, .helmignore honoured, dependencies dropped).

usage: package-chart.py CHART_DIR OUT_DIR VERSION APP_VERSION [--drop-dependency NAME ...]
                        [--eso-crds BUNDLE_YAML]

--eso-crds: generate templates/crds/<singular>.yaml from the CRD bundle the way
External Secrets' hack/helm.generate.sh does for its chart releases (the
generated files are not in the source tree at the release tag).
"""
import argparse, fnmatch, gzip, hashlib, io, os, re, sys, tarfile
import yaml

p = argparse.ArgumentParser()
p.add_argument("chart_dir"); p.add_argument("out_dir")
p.add_argument("version"); p.add_argument("app_version")
p.add_argument("--drop-dependency", action="append", default=[])
p.add_argument("--created", default="1970-01-01T00:00:00Z")
p.add_argument("--eso-crds")
a = p.parse_args()

with open(os.path.join(a.chart_dir, "Chart.yaml")) as f:
    chart = yaml.safe_load(f)
name = chart["name"]
chart["version"] = a.version.lstrip("v")
chart["appVersion"] = a.app_version
deps = chart.get("dependencies") or []
unknown = set(a.drop_dependency) - {d["name"] for d in deps}
if unknown:
    sys.exit(f"no such dependencies: {unknown}")
deps = [d for d in deps if d["name"] not in a.drop_dependency]
if deps:
    sys.exit(f"unresolved dependencies left: {[d['name'] for d in deps]}")
chart.pop("dependencies", None)
chart_yaml = yaml.safe_dump(chart, sort_keys=False).encode()

ignore = []
hi = os.path.join(a.chart_dir, ".helmignore")
if os.path.exists(hi):
    ignore = [l.strip() for l in open(hi) if l.strip() and not l.startswith("#")]

def ignored(rel, is_dir):
    base = os.path.basename(rel)
    for pat in ignore:
        dir_only = pat.endswith("/")
        pt = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        if fnmatch.fnmatch(rel, pt) or fnmatch.fnmatch(base, pt):
            return True
    return False

files = []
for root, dirs, names in os.walk(a.chart_dir):
    relroot = os.path.relpath(root, a.chart_dir)
    dirs[:] = sorted(d for d in dirs if not ignored(os.path.normpath(os.path.join(relroot, d)), True))
    for n in sorted(names):
        rel = os.path.normpath(os.path.join(relroot, n))
        # Chart.lock belongs to the dropped dependencies
        if rel in ("Chart.yaml", "Chart.lock") or ignored(rel, False):
            continue
        files.append(rel)

ANNOT = ('    {{- with .Values.crds.annotations }}\n    {{- toYaml . | nindent 4}}\n    {{- end }}\n'
         '    {{- if and .Values.crds.conversion.enabled .Values.webhook.certManager.enabled '
         '.Values.webhook.certManager.addInjectorAnnotations }}\n'
         '    cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "external-secrets.fullname" . }}-webhook\n'
         '    {{- end }}\n')

def eso_crd_templates(bundle):
    """hack/helm.generate.sh: split, guard with installCRDs/crds.create<Kind>, fix names, annotations hook."""
    text = open(bundle).read()
    out = {}
    for doc in re.split(r"(?m)^---\s*$", text):
        obj = yaml.safe_load(doc)
        if not obj:
            continue
        kind, singular = obj["spec"]["names"]["kind"], obj["spec"]["names"]["singular"]
        flag = "create" + kind
        if "ExternalSecret" in flag or "SecretStore" in flag:
            if any(v["name"] == "v1alpha1" for v in obj["spec"]["versions"]):
                sys.exit(f"{kind}: v1alpha1 conversion templating not implemented")
            doc = "".join(l for l in doc.splitlines(True) if "- |-" not in l)
        if "Cluster" in flag or "PushSecret" in flag:
            head = "{{- if and (.Values.installCRDs) (.Values.crds.%s) }}\n" % flag
        else:
            head = "{{- if .Values.installCRDs }}\n"
        body = doc.lstrip("\n")
        if not body.endswith("\n"):
            body += "\n"
        body = body.replace("name: kubernetes", 'name: {{ include "external-secrets.fullname" . }}-webhook')
        body = body.replace("namespace: default", "namespace: {{ .Release.Namespace | quote }}")
        lines = body.splitlines(True)
        for i, l in enumerate(lines):
            if "annotations" in l:
                lines.insert(i + 1, ANNOT)
                break
        out[f"templates/crds/{singular}.yaml"] = (head + "".join(lines) + "{{- end }}\n").encode()
    return out

generated = eso_crd_templates(a.eso_crds) if a.eso_crds else {}
files = [f for f in files if f not in generated]

os.makedirs(a.out_dir, exist_ok=True)
tgz = os.path.join(a.out_dir, f"{name}-{chart['version']}.tgz")
buf = io.BytesIO()
with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
    with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(rel, data):
            ti = tarfile.TarInfo(f"{name}/{rel}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tar.addfile(ti, io.BytesIO(data))
        add("Chart.yaml", chart_yaml)
        for rel in sorted(files + list(generated)):
            if rel in generated:
                add(rel, generated[rel])
                continue
            with open(os.path.join(a.chart_dir, rel), "rb") as f:
                add(rel, f.read())
with open(tgz, "wb") as f:
    f.write(buf.getvalue())
digest = hashlib.sha256(buf.getvalue()).hexdigest()

entry = {k: v for k, v in chart.items()}
entry.update({"created": a.created, "digest": digest, "urls": [os.path.basename(tgz)]})
index = {"apiVersion": "v1", "entries": {name: [entry]}, "generated": a.created}
with open(os.path.join(a.out_dir, "index.yaml"), "w") as f:
    yaml.safe_dump(index, f, sort_keys=False)
print(tgz)
