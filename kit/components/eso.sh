#!/usr/bin/env bash
# External Secrets Operator for the offline kit: the operator image (one binary
# serves controller, webhook and certcontroller), built with only the AWS
# provider, plus the release's CRD bundle and its Helm chart (.tgz + Helm
# repository index.yaml). Standalone and idempotent.
#
# Several versions side by side (ESO_VERSIONS): the current default and the
# previous one, so an upgrade-path test can bring a stack up with the old
# defaults and upgrade it. ESO_VERSION=vX builds just that one.
#   v0.19.2  the previous devstack default (ESO_CHART_VERSION before #14): one Go
#            module, served by the Go module proxy.
#   v2.9.0   the newest release reachable here. Its apis/, runtime/, providers/v1/*
#            and generators/v1/* are nested modules behind `replace => ./...`, which
#            module zips do not carry and the proxy does not serve (no v2 version at
#            all), so the tree comes from a source archive (a `git archive` of the
#            release commit, sha256-checked) or, online, from a git clone of that
#            commit. All of its dependency modules are served by the proxy.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/flux/common.sh"

ESO_VERSIONS=${ESO_VERSIONS:-v0.19.2 v2.9.0}
ESO_MODULE=github.com/external-secrets/external-secrets
# Providers compiled in; the generators devstack may use (AWS ones plus the
# SDK-free ones) are kept, the others (ACR, GCR, Vault, GitHub, ...) would pull
# in the Azure/GCP/Vault SDKs for nothing.
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
# Several versions share the bundle: index entries are per version.
# shellcheck disable=SC2034  # read by bundle_record (lib.sh)
BUNDLE_BY_VERSION=1

if [ -z "${ESO_VERSION:-}" ]; then
  # One child per version (each sets its own pins), then drop index entries of
  # versions no longer in the list.
  for v in $ESO_VERSIONS; do
    log "eso $v"
    ESO_VERSION=$v bash "${BASH_SOURCE[0]}" || die "eso $v failed"
  done
  chart_versions=(); for v in $ESO_VERSIONS; do chart_versions+=("${v#v}"); done
  # shellcheck disable=SC2086
  bundle_prune_versions image ghcr.io/external-secrets/external-secrets $ESO_VERSIONS
  # shellcheck disable=SC2086
  bundle_prune_versions eso-crds eso-crds $ESO_VERSIONS
  bundle_prune_versions eso-chart eso-chart "${chart_versions[@]}"
  bundle_prune_versions eso-chart-index eso-chart-index "${chart_versions[@]}"
  # One Helm repository with every chart version (artifacts/eso/charts), next
  # to the per-version ones devstack's bundle reader uses.
  indexes=(); for v in $ESO_VERSIONS; do indexes+=("$KIT_BUNDLE/artifacts/eso/$v/index.yaml"); done
  repo_versions=$(python3 "$KIT_ROOT/eso/merge-chart-repo.py" "$KIT_BUNDLE/artifacts/eso/charts" "${indexes[@]}") \
    || die "merging the ESO chart repository failed"
  BUNDLE_BY_VERSION= bundle_add_file_meta eso-chart-repo "${chart_versions[-1]}" artifacts/eso/charts/index.yaml \
    eso-chart-repo "$(jq -nc --arg v "$repo_versions" \
      '{chart:"external-secrets", versions:($v|split(" ")),
        repository:"a Helm repository index holding every kit version; the chart .tgz files sit next to it"}')"
  log "eso: Helm repository artifacts/eso/charts: external-secrets $repo_versions"
  exit 0
fi

# --- per-version pins ----------------------------------------------------------------
ESO_IMAGE=ghcr.io/external-secrets/external-secrets:$ESO_VERSION
case $ESO_VERSION in
  v0.*)
    ESO_SOURCE=module
    # The chart's default image.repository (values.yaml) in 0.19; same image.
    ESO_IMAGE_ALIAS=oci.external-secrets.io/external-secrets/external-secrets:$ESO_VERSION ;;
  v2.9.0)
    ESO_SOURCE=tree
    # "release helm chart for 2.9.0": one commit after tag v2.9.0 (378bdb62),
    # changing only chart metadata (Chart.yaml version/appVersion = 2.9.0).
    ESO_COMMIT=cc5bfbc2234ace9cb0caff4ea89c435cf517b27b
    ESO_ARCHIVE_SHA256=2074037ee3e001df83a644ce7b5830aeb370a4317dbb7763f004ceb0032b9f2f
    # 2.x chart default image.repository is ghcr.io/external-secrets/external-secrets
    # itself: no alias.
    ESO_IMAGE_ALIAS= ;;
  *) die "no pins for ESO $ESO_VERSION (add them to components/eso.sh)" ;;
esac
ESO_GIT_URL=${ESO_GIT_URL:-https://github.com/external-secrets/external-secrets.git}
# Where a source archive (`git archive` of ESO_COMMIT) is looked for: the first
# existing file wins, the git clone is the fallback. ESO_SRC_ARCHIVE=FILE uses
# only that file, ESO_SRC_ARCHIVE=none always clones.
case ${ESO_SRC_ARCHIVE:-} in
  "") archive_candidates=("$KIT_CACHE/src/archives/external-secrets-${ESO_VERSION#v}-src.tar.gz"
        "/work/shared/kit/external-secrets-${ESO_VERSION#v}-src.tar.gz") ;;
  none) archive_candidates=() ;;
  *) [ -f "$ESO_SRC_ARCHIVE" ] || die "ESO_SRC_ARCHIVE=$ESO_SRC_ARCHIVE: no such file"
     archive_candidates=("$ESO_SRC_ARCHIVE") ;;
esac

# --- source tree (writable main module) ----------------------------------------------
dir="$SRC/external-secrets-$ESO_VERSION"
if [ ! -f "$dir/.done" ]; then
  rm -rf "$dir"
  if [ "$ESO_SOURCE" = module ]; then
    mdir=$(GOFLAGS= go mod download -json "$ESO_MODULE@$ESO_VERSION" | jq -r '.Dir // error(.Error)') \
      || die "cannot download $ESO_MODULE@$ESO_VERSION"
    cp -r "$mdir" "$dir"; chmod -R u+w "$dir"
  else
    archive=
    for a in ${archive_candidates[@]+"${archive_candidates[@]}"}; do [ -f "$a" ] && { archive=$a; break; }; done
    if [ -n "$archive" ]; then
      log "source $ESO_VERSION from $archive"
      [ "$(sha256sum "$archive" | cut -d' ' -f1)" = "$ESO_ARCHIVE_SHA256" ] \
        || die "$archive: sha256 is not $ESO_ARCHIVE_SHA256"
      rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"; tar -xzf "$archive" -C "$dir.tmp"
      # git archive --prefix=external-secrets-X/ or no prefix: take the dir holding go.mod
      top=$(dirname "$(find "$dir.tmp" -maxdepth 2 -name go.mod | sort | head -1)")
      [ -f "$top/main.go" ] || die "$archive holds no ESO tree (no main.go next to go.mod)"
      mv "$top" "$dir"; rm -rf "$dir.tmp"
    else
      log "source $ESO_VERSION: git clone $ESO_GIT_URL @ $ESO_COMMIT"
      git init -q "$dir" && git -C "$dir" fetch -q --depth 1 "$ESO_GIT_URL" "$ESO_COMMIT" \
        && git -C "$dir" -c advice.detachedHead=false checkout -q FETCH_HEAD \
        || { rm -rf "$dir"; die "cannot fetch $ESO_GIT_URL $ESO_COMMIT (no source archive either; looked for: ${archive_candidates[*]:-none})"; }
      rm -rf "$dir/.git"
    fi
  fi
  touch "$dir/.done"
fi

# --- provider / generator selection -----------------------------------------------------
if [ "$ESO_SOURCE" = module ]; then
  # 0.x: one register.go per kind imports every implementation; rewrite both.
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
    pp=$(grep -o "pkg/provider/${p}[^\"]*" "$dir/pkg/provider/register/register.go.orig" | head -1)
    [ -n "$pp" ] || die "unknown ESO provider $p"; provs+=("${pp#pkg/provider/}")
  done
  write_register "$dir/pkg/provider/register/register.go" pkg/provider "${provs[@]}"
  # shellcheck disable=SC2086
  write_register "$dir/pkg/generator/register/register.go" pkg/generator $ESO_GENERATORS
  build_tags=; build_pkg=main.go
else
  # 1.x/2.x: each provider registers itself in pkg/register/<name>.go behind a
  # build tag of its name (upstream images use all_providers), so tags pick the
  # providers; the generators file has no tag and is rewritten instead.
  for p in $ESO_PROVIDERS; do
    grep -q "^//go:build .*\b$p\b" "$dir/pkg/register/$p.go" 2>/dev/null || die "unknown ESO provider $p"
  done
  # shellcheck disable=SC2086
  bash "$KIT_ROOT/eso/register-generators.sh" "$dir" $ESO_GENERATORS || die "generator selection failed"
  gofmt -w "$dir/pkg/register/generators.go"
  # shellcheck disable=SC2086  # word splitting normalises the list
  build_tags=$(echo $ESO_PROVIDERS | tr ' ' ','); build_pkg=.
fi

# --- binary and image ------------------------------------------------------------
kit_static_image
# (tree sources add their commit and the generator rewrite; the 0.x stamp keeps
# its earlier inputs so an existing v0.19.2 image stays valid)
tree_inputs=()
[ "$ESO_SOURCE" = tree ] && tree_inputs=("$ESO_COMMIT" "$(sha256sum <"$KIT_ROOT/eso/register-generators.sh")")
stamp=$(stamp_of "$ESO_VERSION" "$ESO_PROVIDERS" "$ESO_GENERATORS" "$(go env GOVERSION)" \
  "$(docker image inspect -f '{{.Id}}' "$KIT_STATIC_IMAGE")" "$IMAGE_RECIPE" ${tree_inputs[@]+"${tree_inputs[@]}"})
if kit_image_current "$ESO_IMAGE" "$stamp"; then
  log "reuse $ESO_IMAGE"
else
  log "go build external-secrets $ESO_VERSION (providers: $ESO_PROVIDERS)"
  t0=$SECONDS
  (cd "$dir" && nice -n 5 go build -trimpath ${build_tags:+-tags "$build_tags"} -ldflags "-s -w" \
     -o "$BIN/external-secrets-$ESO_VERSION" "$build_pkg") \
    || die "go build external-secrets failed"
  log "go build external-secrets: $((SECONDS - t0))s"
  # grep reads all of it: an early exit would fail the pipe under pipefail.
  "$BIN/external-secrets-$ESO_VERSION" --help 2>&1 | grep certcontroller >/dev/null \
    || die "external-secrets $ESO_VERSION has no certcontroller subcommand"
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
refs=("$ESO_IMAGE")
if [ -n "$ESO_IMAGE_ALIAS" ]; then docker tag "$ESO_IMAGE" "$ESO_IMAGE_ALIAS"; refs+=("$ESO_IMAGE_ALIAS"); fi
# One tarball with every reference (bundle_add_image saves one): recorded with
# the alias in "aliases".
file="images/eso-$ESO_VERSION.tar"; id=$(docker image inspect -f '{{.Id}}' "$ESO_IMAGE")
if [ ! -f "$KIT_BUNDLE/$file" ] || [ "$(cat "$KIT_BUNDLE/$file.id" 2>/dev/null)" != "$id" ]; then
  log "docker save ${refs[*]} -> $file"
  docker save "${refs[@]}" -o "$KIT_BUNDLE/$file.tmp"
  mv "$KIT_BUNDLE/$file.tmp" "$KIT_BUNDLE/$file"; echo "$id" >"$KIT_BUNDLE/$file.id"
fi
bundle_record "$(jq -n --arg name "${ESO_IMAGE%:*}" --arg tag "$ESO_VERSION" --arg alias "$ESO_IMAGE_ALIAS" \
  --arg digest "$id" --argjson size "$(stat -c %s "$KIT_BUNDLE/$file")" --arg file "$file" \
  --arg providers "$ESO_PROVIDERS" \
  '{kind:"image", role:"eso", name:$name, tag:$tag, version:$tag, aliases:([$alias]|map(select(. != ""))),
    digest:$digest, size:$size, file:$file, providers:($providers|split(" "))}')"

# --- CRDs, chart, index ------------------------------------------------------------
# Packaging and helm validation take seconds per version: skipped when the
# chart's inputs (tree, packaging script, helm, this script) are unchanged.
adir="artifacts/eso/$ESO_VERSION"; mkdir -p "$KIT_BUNDLE/$adir"
chart_stamp=$(stamp_of "$ESO_VERSION" "$HELM_VERSION" \
  "$(cd "$dir" && find deploy/charts/external-secrets deploy/crds -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)" \
  "$(cat "$KIT_ROOT/eso/package-chart.py" "${BASH_SOURCE[0]}" | sha256sum)")
tgz="$KIT_BUNDLE/$adir/external-secrets-${ESO_VERSION#v}.tgz"
chart_image=${ESO_IMAGE_ALIAS:-$ESO_IMAGE}
fresh=
if [ "$(cat "$KIT_BUNDLE/$adir/.stamp" 2>/dev/null)" != "$chart_stamp" ] || [ ! -f "$tgz" ] \
   || [ ! -f "$KIT_BUNDLE/$adir/index.yaml" ] || [ ! -f "$KIT_BUNDLE/$adir/external-secrets-crds.yaml" ]; then
  fresh=1
  rm -f "$KIT_BUNDLE/$adir/.stamp"
  cp "$dir/deploy/crds/bundle.yaml" "$KIT_BUNDLE/$adir/external-secrets-crds.yaml"
  # The chart's Chart.yaml at a release tag may still say the previous version
  # (the chart is bumped in its own release commit): set version/appVersion.
  rm -f "$KIT_BUNDLE/$adir"/external-secrets-*.tgz
  tgz=$(python3 "$KIT_ROOT/eso/package-chart.py" "$dir/deploy/charts/external-secrets" "$KIT_BUNDLE/$adir" \
    "${ESO_VERSION#v}" "$ESO_VERSION" --drop-dependency "$ESO_CHART_DROP_DEPS" \
    --eso-crds "$dir/deploy/crds/bundle.yaml") || die "chart packaging failed"
fi
bundle_add_file_meta eso-crds "$ESO_VERSION" "$adir/external-secrets-crds.yaml" eso-crds \
  '{"apply":"kubectl apply --server-side -f"}'
chart_meta=$(jq -nc --arg app "$ESO_VERSION" --arg img "$chart_image" --arg drop "$ESO_CHART_DROP_DEPS" \
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
if [ -n "$fresh" ]; then
  HELM_CACHE_HOME=$(mktemp -d) HELM_CONFIG_HOME=$(mktemp -d) "$BIN/helm" lint "$tgz" >/dev/null \
    || { "$BIN/helm" lint "$tgz" >&2; die "helm lint $tgz failed"; }
  rendered=$("$BIN/helm" template external-secrets "$tgz" -n external-secrets)
  imgs=$(grep -o 'image: .*' <<<"$rendered" | tr -d '"' | sort -u)
  [ "$imgs" = "image: $chart_image" ] || die "chart renders unexpected images: $imgs"
  ncrd=$(grep -c '^kind: CustomResourceDefinition' <<<"$rendered" || true)
  [ "$ncrd" = "$(grep -c '^kind: CustomResourceDefinition' "$dir/deploy/crds/bundle.yaml")" ] \
    || die "chart renders $ncrd CRDs, the bundle has $(grep -c '^kind: CustomResourceDefinition' "$dir/deploy/crds/bundle.yaml")"
  # installCRDs=false (how devstack renders it) must leave every CRD out.
  ncrd=$("$BIN/helm" template external-secrets "$tgz" -n external-secrets --set installCRDs=false \
    | grep -c '^kind: CustomResourceDefinition' || true)
  [ "$ncrd" = 0 ] || die "chart renders $ncrd CRDs with installCRDs=false"
  echo "$chart_stamp" >"$KIT_BUNDLE/$adir/.stamp"
fi
log "eso: $ESO_IMAGE ($(docker image inspect -f '{{.Size}}' "$ESO_IMAGE" | numfmt --to=iec)), CRDs, chart $(basename "$tgz")"
