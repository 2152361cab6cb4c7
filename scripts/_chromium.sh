#!/usr/bin/env bash
# Sourced by test.sh: the dashboard's browser tests drive Debian's headless Chromium
# (/usr/bin/chromium and /usr/bin/chromedriver). Installs both with apt-get when missing;
# elsewhere it only says what is missing, and those tests fail naming it.
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  return 0
fi
echo "installing chromium and chromium-driver for the dashboard's browser tests"
if apt_install chromium chromium-driver; then
  return 0
fi
echo "Chromium and chromedriver are missing (/usr/bin/chromium, /usr/bin/chromedriver) and could" >&2
echo "not be installed here; the dashboard's browser tests will fail. On Debian or Ubuntu:" >&2
echo "  apt-get install chromium chromium-driver" >&2
return 0
