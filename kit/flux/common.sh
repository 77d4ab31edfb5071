# Sourced by components/flux.sh and components/eso.sh (after lib.sh).
# (kit_static_image; bundle_add_file_meta)
# kit_static_image: a distroless-static-like base for CGO_ENABLED=0 Go
# binaries: CA bundle, passwd/group (root, nobody 65534, nonroot 65532),
# /tmp (1777) and nothing else. Imported as devstack-kit/static:$KIT_DEBIAN_SUITE.
KIT_STATIC_IMAGE=devstack-kit/static:$KIT_DEBIAN_SUITE
kit_static_image() {
  kit_base_image
  local base_id stamp dir
  base_id=$(docker image inspect -f '{{.Id}}' "$KIT_BASE_IMAGE")
  stamp=$(stamp_of "$base_id" "static-v1")
  if kit_image_current "$KIT_STATIC_IMAGE" "$stamp"; then
    log "reuse $KIT_STATIC_IMAGE"; return 0
  fi
  dir=$(mktemp -d)
  mkdir -p "$dir/etc/ssl/certs" "$dir/tmp" "$dir/home/nonroot" "$dir/root"
  chmod 1777 "$dir/tmp"; chmod 700 "$dir/root"
  docker run --rm "$KIT_BASE_IMAGE" cat /etc/ssl/certs/ca-certificates.crt >"$dir/etc/ssl/certs/ca-certificates.crt"
  [ -s "$dir/etc/ssl/certs/ca-certificates.crt" ] || die "no CA bundle in $KIT_BASE_IMAGE"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$dir/etc/group"
  printf 'hosts: files dns\n' >"$dir/etc/nsswitch.conf"
  chown -R 65532:65532 "$dir/home/nonroot"
  log "docker import $KIT_STATIC_IMAGE"
  tar -C "$dir" --numeric-owner -c . | docker import \
    --change "LABEL dev.devstack.kit.stamp=$stamp" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    - "$KIT_STATIC_IMAGE" >/dev/null
  rm -rf "$dir"
}

# bundle_add_file_meta KIND VERSION RELATIVE_FILE NAME EXTRA_JSON: like
# bundle_add_file, with extra fields merged into the index entry (e.g. the
# images a manifest references, the chart's app version).
bundle_add_file_meta() {
  local kind=$1 version=$2 file=$3 name=$4 extra=$5
  [ -f "$KIT_BUNDLE/$file" ] || die "bundle file missing: $file"
  bundle_record "$(jq -n --arg kind "$kind" --arg name "$name" --arg version "$version" \
    --arg digest "sha256:$(sha256sum "$KIT_BUNDLE/$file" | cut -d' ' -f1)" \
    --argjson size "$(stat -c %s "$KIT_BUNDLE/$file")" --arg file "$file" --argjson extra "$extra" \
    '{kind:$kind, name:$name, version:$version, digest:$digest, size:$size, file:$file} + $extra')"
}
