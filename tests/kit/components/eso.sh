#!/usr/bin/env bash
# External Secrets Operator for the offline kit: the operator image (one binary
# serves controller, webhook and certcontroller), built from the Go module
# with only the AWS provider, plus the release's CRD bundle and its Helm chart
# (.tgz + Helm repository index.yaml). Standalone and idempotent.
#
# Version: v0.19.2 = devstack's src/versions.rs ESO_CHART_VERSION. (The current
# release, v1.3.2, cannot be built offline: its apis/, runtime/, providers/v1/*
# and generators/v1/* are separate modules behind `replace => ./...`, and the Go
# module proxy reachable here serves none of them.)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/flux/common.sh"

ESO_VERSION=${ESO_VERSION:-v0.19.2}
ESO_MODULE=github.com/external-secrets/external-secrets
ESO_IMAGE=ghcr.io/external-secrets/external-secrets:$ESO_VERSION
# The chart's default image.repository (values.yaml) since 0.19; same image.
ESO_IMAGE_ALIAS=oci.external-secrets.io/external-secrets/external-secrets:$ESO_VERSION
# Providers compiled in (pkg/provider/<name>); the chart's other features
# (generators for AWS plus the SDK-free ones) are kept.
ESO_PROVIDERS=${ESO_PROVIDERS:-aws}
ESO_GENERATORS=${ESO_GENERATORS:-ecr sts fake password uuid sshkey mfa webhook}
# Chart dependencies that cannot be resolved offline (OCI chart on ghcr.io,
# enabled only with bitwarden-sdk-server.enabled=true).
ESO_CHART_DROP_DEPS=bitwarden-sdk-server
# helm CLI (from helm.sh/helm/v3), to lint/render the packaged chart here and
# in kit-test (test.d/20-eso.sh); not part of the bundle.
HELM_VERSION=${HELM_VERSION:-v3.19.0}
SRC="$KIT_CACHE/src/eso"; BIN="$KIT_CACHE/bin"
IMAGE_RECIPE=1   # bump when the image recipe below changes
mkdir -p "$SRC" "$BIN"

# --- module source (writable main module) -------------------------------------
dir="$SRC/external-secrets-$ESO_VERSION"
if [ ! -f "$dir/.done" ]; then
  mdir=$(GOFLAGS= go mod download -json "$ESO_MODULE@$ESO_VERSION" | jq -r '.Dir // error(.Error)') \
    || die "cannot download $ESO_MODULE@$ESO_VERSION"
  rm -rf "$dir"; cp -r "$mdir" "$dir"; chmod -R u+w "$dir"
  touch "$dir/.done"
fi
# provider / generator registration: only the selected ones
write_register() { # FILE PKG_PREFIX NAMES...
  local file=$1 prefix=$2; shift 2
  { sed -n '1,/^package /p' "$file.orig"
    echo; echo '// Rewritten by the devstack kit (components/eso.sh): selected implementations only.'
    echo 'import ('
    for n in "$@"; do echo "	_ \"$ESO_MODULE/$prefix/$n\""; done
    echo ')'; } >"$file"
}
for f in pkg/provider/register/register.go pkg/generator/register/register.go; do
  [ -f "$dir/$f.orig" ] || cp "$dir/$f" "$dir/$f.orig"
done
# provider package paths as register.go names them (aws, azure/keyvault, ...)
provs=(); for p in $ESO_PROVIDERS; do
  pp=$(grep -o "pkg/provider/$p[^\"]*" "$dir/pkg/provider/register/register.go.orig" | head -1)
  [ -n "$pp" ] || die "unknown ESO provider $p"; provs+=("${pp#pkg/provider/}")
done
write_register "$dir/pkg/provider/register/register.go" pkg/provider "${provs[@]}"
# shellcheck disable=SC2086
write_register "$dir/pkg/generator/register/register.go" pkg/generator $ESO_GENERATORS

# --- binary and image ------------------------------------------------------------
kit_static_image
stamp=$(stamp_of "$ESO_VERSION" "$ESO_PROVIDERS" "$ESO_GENERATORS" "$(go env GOVERSION)" \
  "$(docker image inspect -f '{{.Id}}' "$KIT_STATIC_IMAGE")" "$IMAGE_RECIPE")
if image_exists "$ESO_IMAGE" && [ "$(image_label "$ESO_IMAGE" dev.devstack.kit.stamp)" = "$stamp" ]; then
  log "reuse $ESO_IMAGE"
else
  log "go build external-secrets $ESO_VERSION (providers: $ESO_PROVIDERS)"
  t0=$SECONDS
  (cd "$dir" && nice -n 5 go build -trimpath -ldflags "-s -w" -o "$BIN/external-secrets-$ESO_VERSION" main.go) \
    || die "go build external-secrets failed"
  log "go build external-secrets: $((SECONDS - t0))s"
  ctx=$(mktemp -d); cp "$BIN/external-secrets-$ESO_VERSION" "$ctx/external-secrets"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $KIT_STATIC_IMAGE
COPY external-secrets /bin/external-secrets
# Run as UID for nobody (as upstream)
USER 65534
ENTRYPOINT ["/bin/external-secrets"]
LABEL maintainer="cncf-externalsecretsop-maintainers@lists.cncf.io" \\
      description="External Secrets Operator (devstack kit build: providers $ESO_PROVIDERS)" \\
      org.opencontainers.image.version="$ESO_VERSION"
DOCKERFILE
  DOCKER_BUILDKIT=0 docker build -q --label "dev.devstack.kit.stamp=$stamp" -t "$ESO_IMAGE" "$ctx" >/dev/null 2>&1 \
    || die "docker build $ESO_IMAGE failed"
  rm -rf "$ctx"
fi
docker tag "$ESO_IMAGE" "$ESO_IMAGE_ALIAS"
# One tarball with both references (bundle_add_image saves one): recorded with
# the alias in "aliases".
file="images/eso-$ESO_VERSION.tar"; id=$(docker image inspect -f '{{.Id}}' "$ESO_IMAGE")
if [ ! -f "$KIT_BUNDLE/$file" ] || [ "$(cat "$KIT_BUNDLE/$file.id" 2>/dev/null)" != "$id" ]; then
  log "docker save $ESO_IMAGE $ESO_IMAGE_ALIAS -> $file"
  docker save "$ESO_IMAGE" "$ESO_IMAGE_ALIAS" -o "$KIT_BUNDLE/$file.tmp"
  mv "$KIT_BUNDLE/$file.tmp" "$KIT_BUNDLE/$file"; echo "$id" >"$KIT_BUNDLE/$file.id"
fi
bundle_record "$(jq -n --arg name "${ESO_IMAGE%:*}" --arg tag "$ESO_VERSION" --arg alias "$ESO_IMAGE_ALIAS" \
  --arg digest "$id" --argjson size "$(stat -c %s "$KIT_BUNDLE/$file")" --arg file "$file" \
  --arg providers "$ESO_PROVIDERS" \
  '{kind:"image", role:"eso", name:$name, tag:$tag, version:$tag, aliases:[$alias], digest:$digest,
    size:$size, file:$file, providers:($providers|split(" "))}')"

# --- CRDs, chart, index ------------------------------------------------------------
adir="artifacts/eso/$ESO_VERSION"; mkdir -p "$KIT_BUNDLE/$adir"
cp "$dir/deploy/crds/bundle.yaml" "$KIT_BUNDLE/$adir/external-secrets-crds.yaml"
bundle_add_file_meta eso-crds "$ESO_VERSION" "$adir/external-secrets-crds.yaml" eso-crds \
  '{"apply":"kubectl apply --server-side -f"}' 
# Chart.yaml in the module at the release tag still says the previous version
# (the chart is bumped in its own release commit): set version/appVersion.
rm -f "$KIT_BUNDLE/$adir"/external-secrets-*.tgz
tgz=$(python3 "$KIT_ROOT/eso/package-chart.py" "$dir/deploy/charts/external-secrets" "$KIT_BUNDLE/$adir" \
  "${ESO_VERSION#v}" "$ESO_VERSION" --drop-dependency "$ESO_CHART_DROP_DEPS" \
  --eso-crds "$dir/deploy/crds/bundle.yaml") || die "chart packaging failed"
chart_meta=$(jq -nc --arg app "$ESO_VERSION" --arg img "$ESO_IMAGE_ALIAS" --arg drop "$ESO_CHART_DROP_DEPS" \
  '{chart:"external-secrets", appVersion:$app, images:[$img], droppedDependencies:($drop|split(" ")),
    notes:"render with installCRDs=false when eso-crds is applied separately"}')
bundle_add_file_meta eso-chart "${ESO_VERSION#v}" "$adir/$(basename "$tgz")" eso-chart "$chart_meta"
bundle_add_file_meta eso-chart-index "${ESO_VERSION#v}" "$adir/index.yaml" eso-chart-index \
  '{"chart":"external-secrets","repository":"a Helm repository index; the chart .tgz sits next to it"}' 
# --- helm: validate the packaged chart --------------------------------------------
if [ ! -x "$BIN/helm-$HELM_VERSION" ]; then
  log "go build helm $HELM_VERSION"
  hdir="$KIT_CACHE/src/helm-$HELM_VERSION"
  if [ ! -f "$hdir/.done" ]; then
    mdir=$(GOFLAGS= go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | jq -r '.Dir // error(.Error)') \
      || die "cannot download helm.sh/helm/v3@$HELM_VERSION"
    rm -rf "$hdir"; cp -r "$mdir" "$hdir"; chmod -R u+w "$hdir"; touch "$hdir/.done"
  fi
  t0=$SECONDS
  (cd "$hdir" && nice -n 5 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
     -o "$BIN/helm-$HELM_VERSION" ./cmd/helm) || die "go build helm failed"
  log "go build helm: $((SECONDS - t0))s"
fi
ln -sf "helm-$HELM_VERSION" "$BIN/helm"
HELM_CACHE_HOME=$(mktemp -d) HELM_CONFIG_HOME=$(mktemp -d) "$BIN/helm" lint "$tgz" >/dev/null \
  || { "$BIN/helm" lint "$tgz" >&2; die "helm lint $tgz failed"; }
imgs=$("$BIN/helm" template external-secrets "$tgz" -n external-secrets | grep -o 'image: .*' | tr -d '"' | sort -u)
[ "$imgs" = "image: $ESO_IMAGE_ALIAS" ] || die "chart renders unexpected images: $imgs"
ncrd=$("$BIN/helm" template external-secrets "$tgz" -n external-secrets | grep -c '^kind: CustomResourceDefinition' || true)
[ "$ncrd" = "$(grep -c '^kind: CustomResourceDefinition' "$dir/deploy/crds/bundle.yaml")" ] \
  || die "chart renders $ncrd CRDs, the bundle has $(grep -c '^kind: CustomResourceDefinition' "$dir/deploy/crds/bundle.yaml")"
log "eso: $ESO_IMAGE ($(docker image inspect -f '{{.Size}}' "$ESO_IMAGE" | numfmt --to=iec)), CRDs, chart $(basename "$tgz")"
