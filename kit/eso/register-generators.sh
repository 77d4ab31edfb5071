#!/usr/bin/env bash
# register-generators.sh TREE NAME...: rewrites TREE/pkg/register/generators.go
# (ESO >= 1.0) so that only the named generators (directories under
# generators/v1/) are registered. Upstream's file has no build tag and imports
# every generator, which drags the Azure, GCP and Vault SDKs into the binary
# even when only the AWS provider is compiled in; generator CRDs stay
# installed, an unregistered generator only fails when a resource uses it.
# The pristine file is kept as generators.go.orig so reruns are idempotent.
set -euo pipefail
tree=$1; shift
f="$tree/pkg/register/generators.go"
[ -f "$f.orig" ] || cp "$f" "$f.orig"
grep -q 'genv1alpha1.Register(' "$f.orig" || { echo "unexpected $f.orig layout" >&2; exit 1; }
{
  sed -n '1,/^package /p' "$f.orig"
  echo
  echo '// Rewritten by the devstack kit (eso/register-generators.sh): selected generators only.'
  echo 'import ('
  echo '	genv1alpha1 "github.com/external-secrets/external-secrets/apis/generators/v1alpha1"'
  for n in "$@"; do
    [ -d "$tree/generators/v1/$n" ] || { echo "unknown ESO generator $n" >&2; exit 1; }
    echo "	gen_$n \"github.com/external-secrets/external-secrets/generators/v1/$n\""
  done
  echo ')'
  echo
  echo 'func init() {'
  for n in "$@"; do echo "	genv1alpha1.Register(gen_$n.Kind(), gen_$n.NewGenerator())"; done
  echo '}'
} >"$f.tmp"
mv "$f.tmp" "$f"
