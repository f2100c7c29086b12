#!/usr/bin/env bash
# The browser the console's tests drive (test/e2e/console-browser.test.ts, through playwright-core):
# Debian's chromium, installed from Debian's mirror when missing. Only the test command needs it.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
echo "[chromium] installing Debian's chromium for the console's browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null 2>&1 ||
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
/usr/bin/chromium --version >&2
