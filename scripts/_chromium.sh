#!/usr/bin/env bash
# Sourced by test.sh: the dashboard's browser tests drive Debian's headless Chromium
# (/usr/bin/chromium and /usr/bin/chromedriver). Installs both with apt-get when missing;
# elsewhere it only says what is missing, and those tests fail naming it.
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  return 0
fi
if command -v apt-get >/dev/null; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else sudo="false"; fi
  fi
  echo "installing chromium and chromium-driver for the dashboard's browser tests"
  if $sudo apt-get update -qq >/dev/null \
      && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null; then
    return 0
  fi
fi
echo "Chromium and chromedriver are missing (/usr/bin/chromium, /usr/bin/chromedriver) and could" >&2
echo "not be installed here; the dashboard's browser tests will fail. On Debian or Ubuntu:" >&2
echo "  apt-get install chromium chromium-driver" >&2
return 0
