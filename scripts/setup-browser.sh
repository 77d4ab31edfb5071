#!/usr/bin/env bash
# Installs Debian's Chromium when missing: the browser test
# (tests/browser/main.rs) renders `up --timings` pages in it headless.
# Safe to run repeatedly; nothing is fetched when it is there.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if command -v chromium >/dev/null; then
  echo "[host] chromium: $(chromium --version 2>/dev/null | head -1)" >&2
  exit 0
fi
echo "[host] apt-get install chromium" >&2
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
