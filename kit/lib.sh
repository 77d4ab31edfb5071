#!/usr/bin/env bash
# Shared helpers for the offline kit scripts. Source this file; do not run it.
#
# Layout of the kit cache (reused across runs and fresh clones on one machine):
#   $KIT_CACHE/rootfs/          debootstrap output and stamps
#   $KIT_CACHE/go/{mod,build}   GOMODCACHE / GOCACHE for every Go build
#   $KIT_CACHE/src/             downloaded sources (wheels, modules, charts)
#   $KIT_BUNDLE/                the offline bundle devstack consumes:
#       index.json              {"apiVersion":"devstack.dev/v1alpha1","kind":"Bundle","artifacts":[...]}
#       images/<file>.tar       `docker save` tarballs
#       artifacts/...           manifests, CRDs, charts
set -euo pipefail

KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIT_CACHE=${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}
KIT_BUNDLE=${DEVSTACK_KIT_BUNDLE:-$KIT_CACHE/bundle}
KIT_DEBIAN_SUITE=${KIT_DEBIAN_SUITE:-bookworm}
KIT_DEBIAN_MIRROR=${KIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
KIT_BASE_IMAGE=devstack-kit/debian:$KIT_DEBIAN_SUITE
export GOMODCACHE=${GOMODCACHE_KIT:-$KIT_CACHE/go/mod}
export GOCACHE=${GOCACHE_KIT:-$KIT_CACHE/go/build}
export GOFLAGS=${GOFLAGS:--mod=mod}
export CGO_ENABLED=${CGO_ENABLED:-0}
mkdir -p "$KIT_CACHE" "$KIT_BUNDLE/images" "$KIT_BUNDLE/artifacts" "$GOMODCACHE" "$GOCACHE"

log() { printf '[kit %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[kit] error: %s\n' "$*" >&2; exit 1; }

# A stamp records the inputs an output was built from; a changed input
# (version, script content) changes the stamp and triggers a rebuild.
stamp_of() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
image_label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }
# kit_image_current IMAGE STAMP: IMAGE exists and was built from STAMP's inputs.
kit_image_current() { image_exists "$1" && [ "$(image_label "$1" dev.devstack.kit.stamp)" = "$2" ]; }

# kit_base_image: a minimal Debian rootfs imported as $KIT_BASE_IMAGE.
# Extra packages for a particular image are installed by that image's own
# build (apt inside containers cannot reach the mirror, so they are
# debootstrapped in: pass them with KIT_BASE_PACKAGES when creating a
# derived rootfs via kit_rootfs_image).
kit_base_image() {
  kit_rootfs_image "$KIT_BASE_IMAGE" "ca-certificates"
}

# kit_rootfs_image IMAGE "pkg1,pkg2,..." ["path ..."]: debootstrap a rootfs
# with these packages and import it as IMAGE (cached by package list). The
# optional paths (relative to the rootfs, globs allowed) are left out of the
# image: files an image's program never reads, whose unpacking every cluster
# node would pay.
kit_rootfs_image() {
  local image=$1 packages=$2 drop=${3:-}
  local stamp
  # An image without dropped paths keeps its stamp (and cache) of before.
  stamp=$(stamp_of "$KIT_DEBIAN_SUITE" "$packages" "rootfs-v1" ${drop:+"$drop"})
  if kit_image_current "$image" "$stamp"; then
    log "reuse $image"
    return 0
  fi
  local dir
  dir=$(kit_rootfs_dir "$stamp" "$packages" "$drop")
  log "docker import $image"
  kit_import_rootfs "$dir" "$image" "$stamp"
}

# kit_import_rootfs DIR IMAGE STAMP: DIR's tree as IMAGE, labelled with STAMP.
kit_import_rootfs() {
  tar -C "$1" --numeric-owner -c . | docker import \
    --change "LABEL dev.devstack.kit.stamp=$3" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$2" >/dev/null
}

# kit_rootfs_dir STAMP "pkg1,..." ["path ..."]: the debootstrapped rootfs
# (cached under STAMP), printed as its directory.
kit_rootfs_dir() {
  local stamp=$1 packages=$2 drop=${3:-}
  local dir="$KIT_CACHE/rootfs/$stamp"
  if [ ! -f "$dir.done" ]; then
    log "debootstrap $KIT_DEBIAN_SUITE (+$packages) -> $dir"
    rm -rf "$dir"
    mkdir -p "$KIT_CACHE/rootfs/debs"
    debootstrap --variant=minbase --include="$packages" \
      --cache-dir="$KIT_CACHE/rootfs/debs" \
      "$KIT_DEBIAN_SUITE" "$dir" "$KIT_DEBIAN_MIRROR" >"$dir.log" 2>&1 \
      || { tail -20 "$dir.log" >&2; die "debootstrap failed (log: $dir.log)"; }
    # Slim the rootfs: docs, man pages and apt lists are dead weight in images.
    rm -rf "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/var/lib/apt/lists/* \
      "$dir"/var/cache/apt/archives/*.deb
    if [ -n "$drop" ]; then
      local path
      # Word splitting and globbing are wanted here: one glob per word.
      for path in $drop; do
        (cd "$dir" && rm -rf -- $path)
      done
    fi
    touch "$dir.done"
  fi
  echo "$dir"
}

# kit_closure_image IMAGE "pkg1,..." "path ...": an image holding, of a
# rootfs debootstrapped with these packages, only the given paths (files, or
# directories whole), every shared library their programs load (ldd, run in
# the rootfs), and the top-level symlinks, users, name-service, loader and
# TLS configuration, and /tmp. For an upstream image built on Alpine: the
# same programs without the rest of a Debian system, so the stand-in is
# about upstream's size, and so is its unpacking into every cluster node.
kit_closure_image() {
  local image=$1 packages=$2 keep=$3
  local stamp
  stamp=$(stamp_of "$KIT_DEBIAN_SUITE" "$packages" "closure-v1" "$keep")
  if kit_image_current "$image" "$stamp"; then
    log "reuse $image"
    return 0
  fi
  local dir list
  dir=$(kit_rootfs_dir "$(stamp_of "$KIT_DEBIAN_SUITE" "$packages" "rootfs-v1")" "$packages")
  list=$(mktemp)
  # Inside the rootfs, so ldd and symlinks resolve against its own files.
  # Every path is written with its directory resolved: a path through a
  # symlinked directory (/lib -> usr/lib) would become a real directory in
  # the image and hide the link.
  chroot "$dir" /bin/bash -s -- $keep >"$list" <<'CLOSURE' || die "closure of $image failed"
set -euo pipefail
canonical() { local d; d=$(readlink -f "$(dirname "$1")"); echo "${d%/}/$(basename "$1")"; }
emit() {
  local path=$1 target
  canonical "$path"
  while [ -L "$path" ]; do
    target=$(readlink "$path")
    case $target in /*) path=$target ;; *) path=$(dirname "$path")/$target ;; esac
    canonical "$path"
  done
}
base=(/bin /sbin /lib /lib64 /etc/passwd /etc/group /etc/nsswitch.conf /etc/ld.so.cache
  /etc/ld.so.conf /etc/ld.so.conf.d /etc/ssl /usr/lib/ssl /usr/share/ca-certificates
  /etc/ca-certificates.conf /tmp)
for top in "${base[@]}"; do [ -e "$top" ] || [ -L "$top" ] && echo "${top#/}"; done
files=$(for p in "$@"; do find "$p" \( -type f -o -type l \); done | sort -u)
{
  for f in $files /etc/ssl/certs/ca-certificates.crt; do emit "$f"; done
  for f in $files; do
    [ -f "$f" ] && [ "$(head -c4 "$f" | tr -d '\0' | tail -c3)" = ELF ] || continue
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
      while read -r lib; do emit "$lib"; done
  done
} | sed 's#^/##' | sort -u
CLOSURE
  local out
  out=$(mktemp -d)
  # --no-recursion for files; the base directories (ssl, ld.so.conf.d) whole.
  tar -C "$dir" --no-recursion -c -T <(grep -vxE 'etc/ssl|usr/lib/ssl|usr/share/ca-certificates|etc/ld.so.conf.d' "$list") \
    | tar -C "$out" -x
  for d in etc/ssl usr/lib/ssl usr/share/ca-certificates etc/ld.so.conf.d; do
    [ -e "$dir/$d" ] && tar -C "$dir" -c "$d" | tar -C "$out" -x
  done
  mkdir -p "$out/tmp" && chmod 1777 "$out/tmp"
  log "docker import $image ($(du -sm "$out" | cut -f1) MB of $(du -sm "$dir" | cut -f1) MB, $(wc -l <"$list") paths)"
  kit_import_rootfs "$out" "$image" "$stamp"
  rm -rf "$out" "$list"
}

# bundle_add_image IMAGE_REF FILE_BASENAME VERSION ROLE
# Saves the image into the bundle (skipped when the saved tarball already
# holds the same image ID) and records it in index.json.
bundle_add_image() {
  local ref=$1 base=$2 version=$3 role=$4
  local file="images/$base.tar" id
  id=$(docker image inspect -f '{{.Id}}' "$ref")
  if [ ! -f "$KIT_BUNDLE/$file" ] || [ "$(cat "$KIT_BUNDLE/$file.id" 2>/dev/null)" != "$id" ]; then
    log "docker save $ref -> $file"
    docker save "$ref" -o "$KIT_BUNDLE/$file.tmp"
    mv "$KIT_BUNDLE/$file.tmp" "$KIT_BUNDLE/$file"
    echo "$id" >"$KIT_BUNDLE/$file.id"
  fi
  local size name tag
  size=$(stat -c %s "$KIT_BUNDLE/$file")
  name=${ref%:*}; tag=${ref##*:}
  bundle_record "$(jq -n --arg kind image --arg role "$role" --arg name "$name" --arg tag "$tag" \
    --arg digest "$id" --argjson size "$size" --arg file "$file" --arg version "$version" \
    '{kind:$kind, role:$role, name:$name, tag:$tag, version:$version, digest:$digest, size:$size, file:$file}')"
}

# bundle_add_file KIND VERSION RELATIVE_FILE [NAME]
# Records a non-image artifact (flux-install, eso-crds, eso-chart, ...) that
# already sits under $KIT_BUNDLE/RELATIVE_FILE.
bundle_add_file() {
  local kind=$1 version=$2 file=$3 name=${4:-$1}
  [ -f "$KIT_BUNDLE/$file" ] || die "bundle file missing: $file"
  local size digest
  size=$(stat -c %s "$KIT_BUNDLE/$file")
  digest="sha256:$(sha256sum "$KIT_BUNDLE/$file" | cut -d' ' -f1)"
  bundle_record "$(jq -n --arg kind "$kind" --arg name "$name" --arg version "$version" \
    --arg digest "$digest" --argjson size "$size" --arg file "$file" \
    '{kind:$kind, name:$name, version:$version, digest:$digest, size:$size, file:$file}')"
}

# Upsert one artifact under a lock so concurrent kit scripts can write the
# same index. Keyed by kind+name, so a version bump replaces the old entry;
# a component that keeps several versions side by side (ESO, LocalStack: the
# old defaults stay for upgrade-path tests) sets BUNDLE_BY_VERSION=1, which
# keys by kind+name+version, and drops versions it no longer builds with
# bundle_prune_versions. Sorted by kind, name, then version (as versions
# compare, not as strings), so the oldest version of a kind comes first.
BUNDLE_BY_VERSION=${BUNDLE_BY_VERSION:-}
bundle_record() {
  local entry=$1 index="$KIT_BUNDLE/index.json"
  (
    flock 9
    [ -f "$index" ] || echo '{"apiVersion":"devstack.dev/v1alpha1","kind":"Bundle","artifacts":[]}' >"$index"
    jq --argjson e "$entry" --arg byv "$BUNDLE_BY_VERSION" "$BUNDLE_JQ_DEFS"'
      def same($a; $b): $a.kind == $b.kind and $a.name == $b.name
        and (($byv == "") or ($a.version == $b.version));
      .artifacts = ([.artifacts[] | select(same(.; $e) | not)] + [$e] | sort_by(.kind, .name, vkey(.version)))' \
      "$index" >"$index.tmp" && mv "$index.tmp" "$index"
  ) 9>"$KIT_BUNDLE/.index.lock"
}
# vkey: "v2.9.0" / "4.14.0" -> [2,9,0] / [4,14,0] for sorting.
BUNDLE_JQ_DEFS='def vkey($v): ($v // "") | ltrimstr("v") | [splits("[.+-]") | (tonumber? // .)];'

# bundle_prune_versions KIND NAME VERSION...: drops index entries of KIND and
# NAME whose version is not listed (their files stay until overwritten).
bundle_prune_versions() {
  local kind=$1 name=$2 index="$KIT_BUNDLE/index.json"; shift 2
  [ -f "$index" ] || return 0
  (
    flock 9
    jq --arg k "$kind" --arg n "$name" --args '
      .artifacts |= [.[] | select(.kind != $k or .name != $n or (.version as $v | $ARGS.positional | index($v)))]' \
      "$@" <"$index" >"$index.tmp" && mv "$index.tmp" "$index"
  ) 9>"$KIT_BUNDLE/.index.lock"
}

# kit_testbox_tar SCRATCH_DIR: prints the path of a cached `docker save` of
# a tiny test image (Debian's static busybox) that kit-test hooks load into
# their nodes; builds it into $KIT_CACHE/test the first time.
KIT_TESTBOX_IMAGE=devstack-kit/testbox:1
kit_testbox_tar() {
  local work=$1 tar="$KIT_CACHE/test/testbox.tar" deb
  if [ ! -f "$tar" ]; then
    mkdir -p "$KIT_CACHE/test/debs" "$work/testbox"
    if ! ls "$KIT_CACHE"/test/debs/busybox-static_*.deb >/dev/null 2>&1; then
      # apt's sandbox user must be able to write where it downloads.
      (cd "$work" && chmod 1777 . && apt-get download -q busybox-static >/dev/null 2>&1 \
        && mv busybox-static_*.deb "$KIT_CACHE/test/debs/") \
        || die "cannot fetch Debian's busybox-static (run apt-get update first)"
    fi
    deb=$(ls "$KIT_CACHE"/test/debs/busybox-static_*.deb | head -1)
    dpkg-deb -x "$deb" "$work/testbox/root"
    cp "$work/testbox/root/bin/busybox" "$work/testbox/busybox"
    printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENTRYPOINT ["/bin/sh"]\n' >"$work/testbox/Dockerfile"
    DOCKER_BUILDKIT=0 docker build -q -t "$KIT_TESTBOX_IMAGE" "$work/testbox" >/dev/null
    docker save "$KIT_TESTBOX_IMAGE" -o "$tar.tmp" && mv "$tar.tmp" "$tar"
  fi
  echo "$tar"
}
