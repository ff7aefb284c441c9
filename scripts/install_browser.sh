#!/usr/bin/env bash
# Opt-in, and apart from scripts/setup.sh: installs the system's Chromium, which the report's browser test
# (tests/reporting/test_browser.py) drives through playwright; without it that test skips, saying why.
# Debian or Ubuntu, as root: `apt-get update`, then `apt-get install chromium`, waiting up to 120 s for a
# package lock another process holds. Exit 0 when `chromium` is on the PATH afterwards (or already was);
# otherwise a line saying why, and exit 1.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "install_browser: chromium is already installed ($(command -v chromium))" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: no apt-get on this system: install Chromium with its package manager, as \`chromium\` on the PATH" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "install_browser: installing a system package needs root: sudo bash scripts/install_browser.sh" >&2
  exit 1
fi
echo "install_browser: apt-get update; apt-get install chromium (the browser of tests/reporting/test_browser.py)" >&2
lock=(-o DPkg::Lock::Timeout=120)
if ! apt-get "${lock[@]}" update -qq >&2; then
  echo "install_browser: apt-get update failed (above; a package lock held past 120 s?): chromium not installed" >&2
  exit 1
fi
if ! DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq chromium >&2; then
  echo "install_browser: apt-get install chromium failed (above; a package lock held past 120 s?)" >&2
  exit 1
fi
if ! command -v chromium >/dev/null 2>&1; then
  echo "install_browser: apt-get installed chromium, but no \`chromium\` is on the PATH" >&2
  exit 1
fi
echo "install_browser: chromium installed ($(command -v chromium))" >&2
