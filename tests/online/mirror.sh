#!/usr/bin/env bash
# A local stand-in for the upstream hosts devstack downloads from, for the
# "online" tests on a machine that reaches no container registry: a real OCI
# registry (devstack-kit/registry, distribution v3) and a static file server
# (devstack-kit/fileserver), both built by the offline kit
# (`bash kit/build.sh mirror`), filled from the kit bundle.
#
#   bash tests/online/mirror.sh start    # run both, push/lay out everything, write pins, print exports
#   bash tests/online/mirror.sh env      # print the export lines of the running mirrors
#   bash tests/online/mirror.sh tamper [image|download]   # swap one image and/or change one byte of one download
#   bash tests/online/mirror.sh stop     # remove both containers (caches stay)
#
#   eval "$(bash tests/online/mirror.sh start)"
#
# start (idempotent; also undoes `tamper`):
#   - containers devstack-test-mirror-registry (127.0.0.1:$MIRROR_REGISTRY_PORT,
#     default 5015) and devstack-test-mirror-files (127.0.0.1:$MIRROR_FILES_PORT,
#     default 8095), label dev.devstack.test-mirror=1; registry storage in
#     $MIRROR_DIR/registry, file server root $MIRROR_DIR/files (read-only mount);
#     MIRROR_DIR defaults to ~/.cache/devstack/mirror;
#   - every image of the bundle index (kind "image": name:tag and its
#     "aliases") is pushed from the local Docker engine under its upstream
#     registry as a path prefix: kindest/node:T -> 127.0.0.1:P/docker.io/kindest/node:T,
#     ghcr.io/fluxcd/x:T -> 127.0.0.1:P/ghcr.io/fluxcd/x:T (an image Docker lacks
#     is loaded from its bundle tarball; one without either is skipped). The
#     mirror-named references are removed from Docker again afterwards, so a
#     pull by devstack really goes to the registry;
#   - downloads are laid out at their upstream paths (<host>/<path>):
#       binary kind vX      github.com/kubernetes-sigs/kind/releases/download/vX/kind-linux-amd64 (+ .sha256sum)
#       flux-install vX     github.com/fluxcd/flux2/releases/download/vX/install.yaml (+ flux_X_checksums.txt)
#       eso-chart X         github.com/external-secrets/external-secrets/releases/download/helm-chart-X/external-secrets-X.tgz
#       eso-crds vX         raw.githubusercontent.com/external-secrets/external-secrets/<commit of vX>/deploy/crds/bundle.yaml
#   - $MIRROR_DIR/pins.json: {"apiVersion":"devstack.dev/v1alpha1","kind":"Pins",
#     "images":{"<name:tag as in the index>":"sha256:<its multi-platform index>"},
#     "files":{"https://<host>/<path>":"sha256:<file bytes>"}};
#   - prints (stdout; logs go to stderr with the prefix [mirror]):
#       export DEVSTACK_MIRRORS=docker.io=http://127.0.0.1:P/docker.io,ghcr.io=http://127.0.0.1:P/ghcr.io,registry.k8s.io=http://127.0.0.1:P/registry.k8s.io
#       export DEVSTACK_DOWNLOAD_MIRROR=http://127.0.0.1:F
#       export DEVSTACK_PINS=<MIRROR_DIR>/pins.json
# tamper: pushes another kit image (rancher/mirrored-pause:3.6, else
#   devstack-kit/debian:bookworm) as the mirror's newest localstack/localstack
#   tag (4.14.0; without one: the last pinned image), and flips the last byte of
#   the Flux install.yaml (without one: of the first laid-out download);
#   pins.json keeps the original digests. Prints the reference and the file
#   with their pinned, old and new digests. `start` undoes it.
# stop: removes the containers labelled dev.devstack.test-mirror; keeps
#   $MIRROR_DIR, so the next start re-pushes quickly (the registry has the blobs).
#
# Bundle: $DEVSTACK_KIT_BUNDLE, else $DEVSTACK_KIT_CACHE/bundle, else
# ~/.cache/devstack/kit/bundle (its index.json). A partial index (kit still
# building) is fine: whatever it lists is mirrored.
set -euo pipefail

MIRROR_DIR=${MIRROR_DIR:-$HOME/.cache/devstack/mirror}
REG_PORT=${MIRROR_REGISTRY_PORT:-5015}
FILES_PORT=${MIRROR_FILES_PORT:-8095}
KIT_CACHE=${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}
BUNDLE=${DEVSTACK_KIT_BUNDLE:-$KIT_CACHE/bundle}
# Also accept the index file itself.
[ -f "$BUNDLE" ] && BUNDLE=$(dirname "$BUNDLE")
INDEX=$BUNDLE/index.json

REGISTRY_IMAGE=devstack-kit/registry:v3.0.0
FILES_IMAGE=devstack-kit/fileserver:1
REGISTRY_CONTAINER=devstack-test-mirror-registry
FILES_CONTAINER=devstack-test-mirror-files
LABEL=dev.devstack.test-mirror
PINS=$MIRROR_DIR/pins.json
# Registries devstack is pointed at (DEVSTACK_MIRRORS).
MIRRORED_REGISTRIES=(docker.io ghcr.io registry.k8s.io)
# ESO CRDs are read at the commit a tag points at (src/versions.rs ESO_CRDS_COMMIT).
declare -A ESO_CRDS_COMMIT=(
  [v2.9.0]=378bdb622ed9712ef4a58370f6a17af033b7d343
)
TAMPER_SOURCES=(rancher/mirrored-pause:3.6 devstack-kit/debian:bookworm)
MANIFEST_ACCEPT='application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json'

log() { printf '[mirror] %s\n' "$*" >&2; }
die() { printf '[mirror] error: %s\n' "$*" >&2; exit 1; }

need_tools() {
  local t
  for t in docker jq curl sha256sum flock; do
    command -v "$t" >/dev/null || die "$t is required"
  done
  docker info >/dev/null 2>&1 || die "no Docker engine answers (run: bash scripts/setup-docker.sh)"
}

need_index() {
  [ -f "$INDEX" ] || die "the kit bundle has no index.json ($INDEX); run make kit"
  jq -e '.kind == "Bundle"' "$INDEX" >/dev/null 2>&1 || die "$INDEX is not a kit bundle index"
}

# upstream_split NAME: "<registry host> <path>" of an image name, as Docker
# reads it (no dot, colon or localhost in the first component: docker.io).
upstream_split() {
  local name=$1 first=${1%%/*}
  if [[ $name == */* ]] && [[ $first == *.* || $first == *:* || $first == localhost ]]; then
    echo "$first ${name#*/}"
  elif [[ $name == */* ]]; then
    echo "docker.io $name"
  else
    echo "docker.io library/$name"
  fi
}

# mirror_repo NAME: the registry path of NAME in the mirror, e.g. docker.io/kindest/node.
mirror_repo() {
  local host path
  read -r host path < <(upstream_split "$1")
  echo "$host/$path"
}

container_running() {
  [ "$(docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]
}

# published_port CONTAINER CONTAINER_PORT: the host port on 127.0.0.1.
published_port() {
  docker port "$1" "$2/tcp" 2>/dev/null | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -1
}

# ensure_container NAME IMAGE HOST_PORT CONTAINER_PORT MOUNT: (re)creates the
# container unless one of that name runs with the same image, port and mount.
ensure_container() {
  local name=$1 image=$2 port=$3 cport=$4 mount=$5 want_id have
  docker image inspect "$image" >/dev/null 2>&1 \
    || die "image $image is missing; build it: bash kit/build.sh mirror"
  want_id=$(docker image inspect -f '{{.Id}}' "$image")
  if docker inspect "$name" >/dev/null 2>&1; then
    [ "$(docker inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$name")" = 1 ] \
      || die "a container named $name exists without label $LABEL; not touching it"
    have=$(docker inspect -f '{{.State.Running}} {{.Image}} {{range .Mounts}}{{.Source}}:{{.Destination}} {{end}}' "$name")
    if [ "$have" = "true $want_id ${mount%:ro} " ] && [ "$(published_port "$name" "$cport")" = "$port" ]; then
      log "$name already running (127.0.0.1:$port)"
      return 0
    fi
    log "replacing $name"
    docker rm -f "$name" >/dev/null
  fi
  log "docker run $name (127.0.0.1:$port -> $cport)"
  docker run -d --name "$name" --label "$LABEL=1" -p "127.0.0.1:$port:$cport" \
    -v "$mount" "$image" >/dev/null \
    || die "cannot start $name on 127.0.0.1:$port (port in use? set MIRROR_REGISTRY_PORT / MIRROR_FILES_PORT)"
}

wait_http() { # DESCRIPTION CURL_ARGS...: until HTTP 200, 30 s at most
  local what=$1 i code; shift
  for i in $(seq 60); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@" || true)
    [ "$code" = 200 ] && return 0
    sleep 0.5
  done
  die "$what does not answer 200 (last: $code)"
}

# registry_digest REPO TAG: Docker-Content-Digest of the manifest, or empty.
registry_digest() {
  curl -fsS -I --max-time 10 -H "Accept: $MANIFEST_ACCEPT" \
    "http://127.0.0.1:$REG_PORT/v2/$1/manifests/$2" 2>/dev/null \
    | tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" {print $2}' || true
}

# registry_config_digest REPO TAG: the image ID (config digest) the tag's
# manifest names (its linux/amd64 manifest's, for an index), or empty.
registry_config_digest() {
  local got
  got=$(curl -fsS --max-time 10 -H "Accept: $MANIFEST_ACCEPT" \
    "http://127.0.0.1:$REG_PORT/v2/$1/manifests/$2" 2>/dev/null) || return 0
  if jq -e '.manifests' >/dev/null 2>&1 <<<"$got"; then
    got=$(jq -r '.manifests[] | select(.platform.architecture == "amd64") | .digest' <<<"$got" | head -1)
    [ -n "$got" ] || return 0
    registry_config_digest "$1" "$got"
    return 0
  fi
  jq -r '.config.digest // empty' 2>/dev/null <<<"$got" || true
}

# push_as LOCAL_REF UPSTREAM_REF: pushes the local image as UPSTREAM_REF's
# mirror reference, prints the manifest digest, then removes the mirror-named
# tag and digest reference from Docker (the local image keeps its own tags).
push_as() {
  local src=$1 up=$2 repo tag mref out digest rd
  repo=$(mirror_repo "${up%:*}"); tag=${up##*:}
  mref="127.0.0.1:$REG_PORT/$repo:$tag"
  docker tag "$src" "$mref"
  if ! out=$(docker push "$mref" 2>&1); then
    docker rmi "$mref" >/dev/null 2>&1 || true
    printf '%s\n' "$out" | tail -5 >&2
    die "docker push $mref failed"
  fi
  digest=$(printf '%s\n' "$out" | sed -n 's/.*digest: \(sha256:[0-9a-f]\{64\}\) size: .*/\1/p' | tail -1)
  rd=$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$mref" \
    | sed -n "s#^127\.0\.0\.1:$REG_PORT/$repo@##p" | head -1)
  [ -n "$digest" ] || digest=$rd
  [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "no manifest digest for $mref in docker push's output"
  docker rmi "$mref" >/dev/null
  # The digest reference stays behind while another tag holds the image.
  if docker image inspect "127.0.0.1:$REG_PORT/$repo@$digest" >/dev/null 2>&1; then
    docker rmi "127.0.0.1:$REG_PORT/$repo@$digest" >/dev/null
  fi
  echo "$digest"
}

# upload_blob REPO FILE: puts FILE into REPO's blobs; prints its digest.
upload_blob() {
  local repo=$1 file=$2 digest location
  digest=sha256:$(sha256sum "$file" | cut -d' ' -f1)
  location=$(curl -fsS -D - -o /dev/null -X POST --max-time 10 \
    "http://127.0.0.1:$REG_PORT/v2/$repo/blobs/uploads/" | tr -d '\r' \
    | awk -F': ' 'tolower($1) == "location" {print $2}')
  [ -n "$location" ] || die "the registry gave no upload location for $repo"
  case $location in http*) ;; *) location="http://127.0.0.1:$REG_PORT$location" ;; esac
  case $location in *\?*) location="$location&digest=$digest" ;; *) location="$location?digest=$digest" ;; esac
  curl -fsS -o /dev/null -X PUT --max-time 30 -H 'Content-Type: application/octet-stream' \
    --data-binary "@$file" "$location" || die "blob upload to $repo failed"
  echo "$digest"
}

# put_manifest REPO REFERENCE MEDIA_TYPE FILE: prints the manifest's digest.
put_manifest() {
  curl -fsS -o /dev/null -X PUT --max-time 10 -H "Content-Type: $3" \
    --data-binary "@$4" "http://127.0.0.1:$REG_PORT/v2/$1/manifests/$2" \
    || die "manifest upload to $1:$2 failed"
  echo "sha256:$(sha256sum "$4" | cut -d' ' -f1)"
}

# as_index REPO TAG: makes the tag a multi-platform index, as upstream
# publishes its images: the pushed linux/amd64 manifest and a linux/arm64
# one (an empty image: never pulled here, but an engine that exports the
# whole index instead of its platform fails on its absent content, as
# Docker's containerd image store does: kind #3795). Prints the index's
# digest, which becomes the pin, as upstream's pins are index digests.
as_index() {
  local repo=$1 tag=$2 dir=$WORK/index mt list_mt config_mt digest size config stub stub_digest
  mkdir -p "$dir"
  curl -fsS --max-time 10 -H "Accept: $MANIFEST_ACCEPT" -o "$dir/pushed.json" \
    "http://127.0.0.1:$REG_PORT/v2/$repo/manifests/$tag" || die "cannot read $repo:$tag back"
  mt=$(jq -r '.mediaType // "application/vnd.oci.image.manifest.v1+json"' "$dir/pushed.json")
  case $mt in
    *manifest.list* | *image.index*) registry_digest "$repo" "$tag"; return ;;
    application/vnd.docker.*)
      list_mt=application/vnd.docker.distribution.manifest.list.v2+json
      config_mt=application/vnd.docker.container.image.v1+json ;;
    *)
      list_mt=application/vnd.oci.image.index.v1+json
      config_mt=application/vnd.oci.image.config.v1+json ;;
  esac
  digest=sha256:$(sha256sum "$dir/pushed.json" | cut -d' ' -f1)
  size=$(stat -c %s "$dir/pushed.json")
  printf '%s' '{"architecture":"arm64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":[]}}' >"$dir/config.json"
  config=$(upload_blob "$repo" "$dir/config.json")
  jq -cn --arg mt "$mt" --arg cmt "$config_mt" --arg digest "$config" --argjson size "$(stat -c %s "$dir/config.json")" \
    '{schemaVersion: 2, mediaType: $mt, config: {mediaType: $cmt, size: $size, digest: $digest}, layers: []}' \
    | tr -d '\n' >"$dir/stub.json"
  stub_digest=$(put_manifest "$repo" "sha256:$(sha256sum "$dir/stub.json" | cut -d' ' -f1)" "$mt" "$dir/stub.json")
  stub=$(stat -c %s "$dir/stub.json")
  jq -cn --arg lmt "$list_mt" --arg mt "$mt" --arg d "$digest" --argjson s "$size" --arg sd "$stub_digest" --argjson ss "$stub" \
    '{schemaVersion: 2, mediaType: $lmt, manifests: [
       {mediaType: $mt, size: $s, digest: $d, platform: {architecture: "amd64", os: "linux"}},
       {mediaType: $mt, size: $ss, digest: $sd, platform: {architecture: "arm64", os: "linux"}}]}' \
    | tr -d '\n' >"$dir/index.json"
  put_manifest "$repo" "$tag" "$list_mt" "$dir/index.json"
}

# ensure_local_image REF FILE: Docker has REF, or loads it from the bundle tarball.
ensure_local_image() {
  local ref=$1 file=$2
  docker image inspect "$ref" >/dev/null 2>&1 && return 0
  if [ -n "$file" ] && [ -f "$BUNDLE/$file" ]; then
    log "docker load $file (Docker has no $ref)"
    docker load -i "$BUNDLE/$file" >/dev/null && docker image inspect "$ref" >/dev/null 2>&1 && return 0
  fi
  return 1
}

print_env() {
  local reg=$1 files=$2 mirrors=() r
  for r in "${MIRRORED_REGISTRIES[@]}"; do mirrors+=("$r=http://127.0.0.1:$reg/$r"); done
  local IFS=,
  echo "export DEVSTACK_MIRRORS=${mirrors[*]}"
  echo "export DEVSTACK_DOWNLOAD_MIRROR=http://127.0.0.1:$files"
  printf 'export DEVSTACK_PINS=%q\n' "$PINS"
}

# place SRC RELPATH: copies SRC to files/RELPATH (atomically) and records it.
place() {
  local src=$1 rel=$2 dst="$MIRROR_DIR/files/$2"
  mkdir -p "$(dirname "$dst")"
  cp "$src" "$dst.tmp.$$" && chmod 0644 "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
  printf '%s\n' "$rel" >>"$WORK/placed"
  printf '%s\t%s\n' "https://$rel" "sha256:$(sha256sum "$dst" | cut -d' ' -f1)" >>"$WORK/files.tsv"
}

# place_text TEXT RELPATH
place_text() {
  printf '%s' "$1" >"$WORK/text" && place "$WORK/text" "$2"
}

layout_files() {
  local kind name version file sha gh=github.com
  : >"$WORK/placed"
  while IFS=$'\t' read -r kind name version file; do
    if [ ! -f "$BUNDLE/$file" ]; then
      log "skip $kind $name $version: $file is not in the bundle"
      continue
    fi
    sha=$(sha256sum "$BUNDLE/$file" | cut -d' ' -f1)
    case $kind in
      binary)
        [ "$name" = kind ] || { log "skip binary $name (no upstream path known)"; continue; }
        local d="$gh/kubernetes-sigs/kind/releases/download/$version"
        place "$BUNDLE/$file" "$d/kind-linux-amd64"
        place_text "$sha  kind-linux-amd64"$'\n' "$d/kind-linux-amd64.sha256sum"
        ;;
      flux-install)
        local d="$gh/fluxcd/flux2/releases/download/$version"
        place "$BUNDLE/$file" "$d/install.yaml"
        place_text "$sha  install.yaml"$'\n' "$d/flux_${version#v}_checksums.txt"
        ;;
      eso-chart)
        local v=${version#v}
        place "$BUNDLE/$file" "$gh/external-secrets/external-secrets/releases/download/helm-chart-$v/external-secrets-$v.tgz"
        ;;
      eso-crds)
        local commit=${ESO_CRDS_COMMIT[$version]:-}
        if [ -z "$commit" ]; then
          log "skip eso-crds $version: no commit known for it (ESO_CRDS_COMMIT in $0)"
          continue
        fi
        place "$BUNDLE/$file" "raw.githubusercontent.com/external-secrets/external-secrets/$commit/deploy/crds/bundle.yaml"
        ;;
    esac
  done < <(jq -r '.artifacts[] | select((.kind == "binary" and .name == "kind") or .kind == "flux-install"
      or .kind == "eso-chart" or .kind == "eso-crds") | [.kind, .name, .version, .file] | @tsv' "$INDEX")
  # Anything else under files/ (an old version, a tampered leftover) goes.
  local f
  while IFS= read -r f; do
    grep -qxF "${f#"$MIRROR_DIR/files/"}" "$WORK/placed" || rm -f "$f"
  done < <(find "$MIRROR_DIR/files" -type f)
  find "$MIRROR_DIR/files" -mindepth 1 -type d -empty -delete
  chmod -R a+rX "$MIRROR_DIR/files"
}

push_images() {
  local name tag file id aliases ref refs more up pushed=0 skipped=0 digest
  while IFS=$'\t' read -r name tag file id aliases; do
    # (empty fields are "-": read merges adjacent tabs)
    [ "$file" != - ] || file=; [ "$id" != - ] || id=; [ "$aliases" != - ] || aliases=
    ref="$name:$tag"
    if ! ensure_local_image "$ref" "$file"; then
      log "skip $ref: neither Docker nor the bundle has it"
      skipped=$((skipped + 1))
      continue
    fi
    [ -z "$id" ] || [ "$(docker image inspect -f '{{.Id}}' "$ref")" = "$id" ] \
      || log "warning: Docker's $ref is not the bundle's image $id (kit rebuilding?); pushing Docker's"
    refs=("$ref")
    [ -n "$aliases" ] && read -r -a more <<<"$aliases" && refs+=("${more[@]}")
    for up in "${refs[@]}"; do
      log "push $up -> 127.0.0.1:$REG_PORT/$(mirror_repo "${up%:*}"):${up##*:}"
      digest=$(push_as "$ref" "$up")
      digest=$(as_index "$(mirror_repo "${up%:*}")" "${up##*:}")
      printf '%s\t%s\n' "$up" "$digest" >>"$WORK/images.tsv"
      pushed=$((pushed + 1))
    done
  done < <(jq -r '.artifacts[] | select(.kind == "image") | [.name, .tag, (.file // "-"), (.digest // "-"), ((.aliases // []) | join(" ") | if . == "" then "-" else . end)] | @tsv' "$INDEX")
  log "$pushed image references pushed, $skipped skipped"
}

write_pins() {
  jq -n --rawfile images "$WORK/images.tsv" --rawfile files "$WORK/files.tsv" '
    def obj: split("\n") | map(select(length > 0) | split("\t") | {key: .[0], value: .[1]}) | sort_by(.key) | from_entries;
    {apiVersion: "devstack.dev/v1alpha1", kind: "Pins", images: ($images | obj), files: ($files | obj)}' \
    >"$PINS.tmp"
  mv -f "$PINS.tmp" "$PINS"
}

cmd_start() {
  need_tools
  need_index
  local t0=$SECONDS
  mkdir -p "$MIRROR_DIR/registry" "$MIRROR_DIR/files"
  exec 9>"$MIRROR_DIR/.lock"; flock 9
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
  : >"$WORK/images.tsv"; : >"$WORK/files.tsv"
  ensure_container "$REGISTRY_CONTAINER" "$REGISTRY_IMAGE" "$REG_PORT" 5000 "$MIRROR_DIR/registry:/var/lib/registry"
  ensure_container "$FILES_CONTAINER" "$FILES_IMAGE" "$FILES_PORT" 8080 "$MIRROR_DIR/files:/srv:ro"
  wait_http "the registry (127.0.0.1:$REG_PORT/v2/)" "http://127.0.0.1:$REG_PORT/v2/"
  push_images
  layout_files
  write_pins
  log "pins: $PINS ($(jq '.images | length' "$PINS") images, $(jq '.files | length' "$PINS") files)"
  wait_http "the registry (127.0.0.1:$REG_PORT/v2/)" "http://127.0.0.1:$REG_PORT/v2/"
  local probe
  probe=$(head -1 "$WORK/placed")
  if [ -n "$probe" ]; then
    wait_http "the file server (HEAD /$probe)" -I "http://127.0.0.1:$FILES_PORT/$probe"
  else
    log "warning: the bundle has no downloads to serve yet; the file server is up but empty"
  fi
  log "ready in $((SECONDS - t0)) s: registry 127.0.0.1:$REG_PORT, files 127.0.0.1:$FILES_PORT"
  print_env "$REG_PORT" "$FILES_PORT"
}

# running_ports: sets REG_PORT and FILES_PORT from the running containers.
running_ports() {
  container_running "$REGISTRY_CONTAINER" || die "$REGISTRY_CONTAINER is not running (bash tests/online/mirror.sh start)"
  container_running "$FILES_CONTAINER" || die "$FILES_CONTAINER is not running (bash tests/online/mirror.sh start)"
  REG_PORT=$(published_port "$REGISTRY_CONTAINER" 5000)
  FILES_PORT=$(published_port "$FILES_CONTAINER" 8080)
  [ -n "$REG_PORT" ] && [ -n "$FILES_PORT" ] || die "cannot read the mirrors' published ports"
}

cmd_env() {
  command -v docker >/dev/null || die "docker is required"
  docker info >/dev/null 2>&1 || die "no Docker engine answers"
  running_ports
  [ -f "$PINS" ] || die "no pins file $PINS (bash tests/online/mirror.sh start)"
  print_env "$REG_PORT" "$FILES_PORT"
}

cmd_tamper() { # [image|download]: one of the two (default: both)
  local what=${1:-both}
  case $what in image|download|both) ;; *) die "tamper what? image, download (default: both)" ;; esac
  need_tools
  need_index
  running_ports
  [ -f "$PINS" ] || die "no pins file $PINS (bash tests/online/mirror.sh start)"
  exec 9>"$MIRROR_DIR/.lock"; flock 9
  [ "$what" = download ] || tamper_image
  [ "$what" = image ] || tamper_download
}

tamper_image() {
  # The image: the newest localstack/localstack tag pushed (else the last image pinned).
  local target src s repo before after target_id
  target=$(jq -r '.images | keys[]' "$PINS" | grep '^localstack/localstack:' | sort -V | tail -1 || true)
  if [ -z "$target" ]; then
    target=$(jq -r '.images | keys[]' "$PINS" | sort | tail -1)
    [ -n "$target" ] || die "the mirror holds no image to tamper with (pins.json lists none)"
    log "no localstack/localstack in the mirror; tampering with $target instead"
  fi
  # The replacement: a kit image with other content than the target.
  target_id=$(registry_config_digest "$(mirror_repo "${target%:*}")" "${target##*:}")
  src=
  for s in "${TAMPER_SOURCES[@]}"; do
    docker image inspect "$s" >/dev/null 2>&1 || continue
    [ "$(docker image inspect -f '{{.Id}}' "$s")" != "$target_id" ] && { src=$s; break; }
  done
  [ -n "$src" ] || die "none of ${TAMPER_SOURCES[*]} is in Docker (with other content) to push in place of $target"
  repo=$(mirror_repo "${target%:*}")
  before=$(registry_digest "$repo" "${target##*:}")
  log "push $src as 127.0.0.1:$REG_PORT/$repo:${target##*:}"
  after=$(push_as "$src" "$target")
  echo "image $target (127.0.0.1:$REG_PORT/$repo:${target##*:}): pinned $(jq -r --arg k "$target" '.images[$k] // "none"' "$PINS"), was ${before:-absent}, now $after ($src)"
}

tamper_download() {
  # The download: the Flux install.yaml (else the first laid-out file): its last byte flipped.
  local rel file old new
  rel=$(cd "$MIRROR_DIR/files" && find github.com/fluxcd/flux2 -name install.yaml 2>/dev/null | sort | tail -1)
  if [ -z "$rel" ]; then
    rel=$(cd "$MIRROR_DIR/files" && find . -type f ! -name '*.sha256sum' ! -name '*checksums.txt' | sed 's#^\./##' | sort | head -1)
    [ -n "$rel" ] || { log "warning: no download laid out; only the image was tampered with"; return 0; }
    log "no Flux install.yaml laid out; tampering with $rel instead"
  fi
  file=$MIRROR_DIR/files/$rel
  old=$(sha256sum "$file" | cut -d' ' -f1)
  local last
  last=$(tail -c1 "$file" | od -An -tx1 | tr -d ' \n')
  head -c -1 "$file" >"$file.tmp.$$"
  if [ "$last" = 0a ]; then printf ' ' >>"$file.tmp.$$"; else printf '\n' >>"$file.tmp.$$"; fi
  chmod 0644 "$file.tmp.$$" && mv -f "$file.tmp.$$" "$file"
  new=$(sha256sum "$file" | cut -d' ' -f1)
  echo "file https://$rel (http://127.0.0.1:$FILES_PORT/$rel): last byte 0x$last changed; pinned $(jq -r --arg k "https://$rel" '.files[$k] // "none"' "$PINS"), was sha256:$old, now sha256:$new"
}

cmd_stop() {
  command -v docker >/dev/null || die "docker is required"
  docker info >/dev/null 2>&1 || die "no Docker engine answers"
  local ids
  ids=$(docker ps -aq --filter "label=$LABEL")
  if [ -z "$ids" ]; then
    log "no mirror containers"
    return 0
  fi
  local id
  for id in $ids; do
    log "docker rm -f $(docker inspect -f '{{.Name}}' "$id" | tr -d /)"
    docker rm -f "$id" >/dev/null
  done
  log "stopped; caches stay in $MIRROR_DIR"
}

case ${1:-} in
  start) cmd_start ;;
  env) cmd_env ;;
  tamper) cmd_tamper "${2:-}" ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|env|tamper [image|download]|stop" >&2; exit 2 ;;
esac
