#!/usr/bin/env bash
# Flux for the offline kit: source-controller, kustomize-controller and
# helm-controller images at the versions Flux $FLUX_VERSION bundles, each built
# from its Go module, plus the install manifest equivalent to
#   flux install --export --components=source-controller,kustomize-controller,helm-controller
# (rendered by that very command: the flux CLI is built from the flux2 module
# with its embedded manifests generated from the controllers' config/ dirs).
# Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/flux/common.sh"

# Flux release: v2.9.5 is the release whose controller modules the Go module
# proxy reachable here serves (v2.6.4 = devstack's src/versions.rs pin needs
# source-controller v1.6.2 / kustomize-controller v1.6.1 / helm-controller
# v1.3.0, all "403 not available"; v2.7.x needs source-controller v1.7.4, also
# refused). flux check wants Kubernetes >= 1.33 for v2.9.
FLUX_VERSION=${FLUX_VERSION:-v2.9.5}
KUSTOMIZE_VERSION=v5.8.1                   # kustomize/api v0.21.1, as flux2 $FLUX_VERSION
FLUX_COMPONENTS=(source-controller kustomize-controller helm-controller)
SRC="$KIT_CACHE/src/flux"
BIN="$KIT_CACHE/bin"
# Bump when the image / manifest recipe below changes (stamps, not the whole
# script, decide rebuilds).
IMAGE_RECIPE=1 MANIFEST_RECIPE=1
mkdir -p "$SRC" "$BIN"
# Module versions the Go module proxy reachable here refuses ("403 This module
# version is not available"): pin the nearest available patch release.
declare -A GO_FIXUPS=(
  [source-controller@v1.9.5]="github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.1"  # wants v0.18.3
)
# gobuild "EXTRA_LDFLAGS" GO_BUILD_ARGS...
gobuild() { local x=$1; shift; nice -n 5 go build -trimpath -ldflags "-s -w $x" "$@"; }

# mod_dir MODULE VERSION: download a module, print its (read-only) dir.
mod_dir() { GOFLAGS= go mod download -json "$1@$2" | jq -r '.Dir // error(.Error)'; }

# writable_copy MODULE VERSION DEST: the module as a writable main module; its
# nested api module (excluded from the module zip) is added as ./api at the
# version go.mod requires, which is what the `replace ... => ./api` expects.
writable_copy() {
  local mod=$1 ver=$2 dest=$3 dir api_ver
  [ -f "$dest/.done" ] && return 0
  dir=$(mod_dir "$mod" "$ver") || die "cannot download $mod@$ver from the Go module proxy"
  rm -rf "$dest"; cp -r "$dir" "$dest"; chmod -R u+w "$dest"
  if grep -q "^replace $mod/api => ./api" "$dest/go.mod"; then
    api_ver=$(awk -v m="$mod/api" '$1==m && $2 ~ /^v/ {print $2; exit}' "$dest/go.mod")
    [ -n "$api_ver" ] || die "no $mod/api version in go.mod"
    dir=$(mod_dir "$mod/api" "$api_ver") || die "cannot download $mod/api@$api_ver"
    cp -r "$dir" "$dest/api"; chmod -R u+w "$dest/api"
  fi
  local fix
  for fix in ${GO_FIXUPS[${mod##*/}@$ver]:-}; do
    log "go mod edit -replace $fix ($mod $ver)"
    (cd "$dest" && go mod edit -replace "$fix")
  done
  touch "$dest/.done"
}

# --- flux2 release: the controller versions it bundles ----------------------
FLUX2_DIR="$SRC/flux2-$FLUX_VERSION"
writable_copy github.com/fluxcd/flux2/v2 "$FLUX_VERSION" "$FLUX2_DIR"
declare -A CVER
for c in "${FLUX_COMPONENTS[@]}"; do
  CVER[$c]=$(grep -o "fluxcd/$c/releases/download/v[^/]*/" "$FLUX2_DIR/manifests/bases/$c/kustomization.yaml" | head -1 | cut -d/ -f5)
  [ -n "${CVER[$c]}" ] || die "no $c version in flux2 $FLUX_VERSION"
  log "flux $FLUX_VERSION: $c ${CVER[$c]}"
done

# --- controller binaries and images ------------------------------------------
kit_static_image
KUSTOMIZE_BASE=devstack-kit/flux-kustomize-base:$KIT_DEBIAN_SUITE
# upstream kustomize-controller image: alpine + ca-certificates tini git
# openssh-client gnupg. A Debian system with the same packages is 140 MB
# before the controller (Perl, apt, dpkg, message catalogues, iconv modules),
# and a cold `up` imports the image into every node on its critical path: the
# base holds the same programs and what they load (61 MB).
kit_closure_image "$KUSTOMIZE_BASE" "ca-certificates,tini,git,openssh-client,gnupg" \
  "/usr/bin/git /usr/lib/git-core /usr/share/git-core
   /usr/bin/ssh /usr/bin/ssh-keygen /usr/bin/ssh-keyscan /usr/bin/ssh-agent /usr/bin/ssh-add /usr/lib/openssh /etc/ssh
   /usr/bin/gpg /usr/bin/gpg-agent /usr/bin/gpgconf /usr/bin/gpg-connect-agent /usr/bin/gpgsm /usr/bin/dirmngr
   /usr/bin/gpgv /usr/lib/gnupg /usr/share/gnupg
   /usr/bin/tini /usr/bin/sh /usr/bin/dash"

for c in "${FLUX_COMPONENTS[@]}"; do
  v=${CVER[$c]}; ref=ghcr.io/fluxcd/$c:$v; dir="$SRC/$c-$v"
  case $c in
    kustomize-controller) base=$KUSTOMIZE_BASE
      # Debian's tini is /usr/bin/tini (Alpine's /sbin/tini); the base has no ln.
      extra='ENV GNUPGHOME=/tmp
ENTRYPOINT ["/usr/bin/tini", "--", "kustomize-controller"]' ;;
    *) base=$KIT_STATIC_IMAGE; extra="ENTRYPOINT [\"$c\"]" ;;
  esac
  stamp=$(stamp_of "$c" "$v" "$(go env GOVERSION)" "$(docker image inspect -f '{{.Id}}' "$base")" \
    "${GO_FIXUPS[$c@$v]:-}" "$IMAGE_RECIPE")
  if kit_image_current "$ref" "$stamp"; then
    log "reuse $ref"
  else
    writable_copy "github.com/fluxcd/$c" "$v" "$dir"
    log "go build $c $v"
    t0=$SECONDS
    (cd "$dir" && gobuild "" -o "$BIN/$c-$v" .) || die "go build $c failed"
    log "go build $c: $((SECONDS - t0))s"
    ctx=$(mktemp -d); cp "$BIN/$c-$v" "$ctx/$c"
    printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nUSER 65534:65534\n%s\nLABEL org.opencontainers.image.version=%s org.opencontainers.image.source=https://github.com/fluxcd/%s\n' \
      "$base" "$c" "$c" "$extra" "$v" "$c" >"$ctx/Dockerfile"
    DOCKER_BUILDKIT=0 docker build --label "dev.devstack.kit.stamp=$stamp" -t "$ref" "$ctx" >"$ctx.log" 2>&1 \
      || { tail -20 "$ctx.log" >&2; die "docker build $ref failed"; }
    rm -f "$ctx.log"
    rm -rf "$ctx"
  fi
  bundle_add_image "$ref" "flux-$c-$v" "$v" "flux-$c"
done

# --- install manifest ----------------------------------------------------------
out_rel="artifacts/flux/$FLUX_VERSION/flux-install.yaml"
out="$KIT_BUNDLE/$out_rel"
mstamp=$(stamp_of "$FLUX_VERSION" "${CVER[@]}" "$KUSTOMIZE_VERSION" "$MANIFEST_RECIPE")
if [ "$(cat "$out.stamp" 2>/dev/null)" != "$mstamp" ] || [ ! -s "$out" ]; then
  # kustomize, to render the controllers' release assets and flux2's bases
  if [ ! -x "$BIN/kustomize-$KUSTOMIZE_VERSION" ]; then
    log "go build kustomize $KUSTOMIZE_VERSION"
    kdir=$(mod_dir sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION")
    tmpk=$(mktemp -d); cp -r "$kdir/." "$tmpk"; chmod -R u+w "$tmpk"
    (cd "$tmpk" && gobuild "-X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION" -o "$BIN/kustomize-$KUSTOMIZE_VERSION" .) \
      || die "go build kustomize failed"
    rm -rf "$tmpk"
  fi
  KUSTOMIZE="$BIN/kustomize-$KUSTOMIZE_VERSION"
  # the release assets <c>.crds.yaml / <c>.deployment.yaml, as the
  # controllers' release workflows make them (kustomize build config/{crd,manager})
  work=$(mktemp -d)
  cp -r "$FLUX2_DIR/manifests" "$work/manifests"; chmod -R u+w "$work/manifests"
  for c in "${FLUX_COMPONENTS[@]}"; do
    v=${CVER[$c]}; dir="$SRC/$c-$v"
    writable_copy "github.com/fluxcd/$c" "$v" "$dir"
    "$KUSTOMIZE" build "$dir/config/crd" >"$work/manifests/bases/$c/$c.crds.yaml"
    "$KUSTOMIZE" build "$dir/config/manager" >"$work/manifests/bases/$c/$c.deployment.yaml"
    sed -i "s#https://github.com/fluxcd/$c/releases/download/$v/##" "$work/manifests/bases/$c/kustomization.yaml"
  done
  # manifests/scripts/bundle.sh, for the components the kit ships
  emb="$FLUX2_DIR/cmd/flux/manifests"; rm -rf "$emb"; mkdir -p "$emb"
  for c in "${FLUX_COMPONENTS[@]}"; do "$KUSTOMIZE" build "$work/manifests/bases/$c" >"$emb/$c.yaml"; done
  "$KUSTOMIZE" build "$work/manifests/rbac" >"$emb/rbac.yaml"
  "$KUSTOMIZE" build "$work/manifests/policies" >"$emb/policies.yaml"
  rm -rf "$work"
  log "go build flux ${FLUX_VERSION#v}"
  t0=$SECONDS
  (cd "$FLUX2_DIR" && gobuild "-X main.VERSION=${FLUX_VERSION#v}" -o "$BIN/flux-$FLUX_VERSION" ./cmd/flux) \
    || die "go build flux failed"
  log "go build flux: $((SECONDS - t0))s"
  mkdir -p "$(dirname "$out")"
  comps=$(IFS=,; echo "${FLUX_COMPONENTS[*]}")
  # no kubeconfig needed for --export; an empty one keeps it off any cluster
  KUBECONFIG=/dev/null "$BIN/flux-$FLUX_VERSION" install --export --components="$comps" >"$out.tmp" \
    || die "flux install --export failed"
  for c in "${FLUX_COMPONENTS[@]}"; do
    grep -q "image: ghcr.io/fluxcd/$c:${CVER[$c]}\$" "$out.tmp" || die "$out_rel: no image ghcr.io/fluxcd/$c:${CVER[$c]}"
  done
  mv "$out.tmp" "$out"; echo "$mstamp" >"$out.stamp"
fi
ln -sf "flux-$FLUX_VERSION" "$BIN/flux"
imgs=$(for c in "${FLUX_COMPONENTS[@]}"; do echo "ghcr.io/fluxcd/$c:${CVER[$c]}"; done | jq -R . | jq -sc .)
comps=$(printf '%s\n' "${FLUX_COMPONENTS[@]}" | jq -R . | jq -sc .)
bundle_add_file_meta flux-install "$FLUX_VERSION" "$out_rel" flux-install \
  "{\"namespace\":\"flux-system\",\"components\":$comps,\"images\":$imgs,\"apply\":\"kubectl apply --server-side -f\"}"
log "flux: $(grep -c '^kind:' "$out") objects in $out_rel"
