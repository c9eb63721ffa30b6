#!/usr/bin/env bash
# Prints the path of Debian's Chromium, installing `chromium` when it is missing (the UI
# test drives it with Playwright; nothing downloads a browser at run time).
set -euo pipefail
if ! command -v chromium >/dev/null; then
  echo "installing Debian's chromium package" >&2
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2
  $sudo apt-get install -y -qq --no-install-recommends chromium >&2
fi
command -v chromium
