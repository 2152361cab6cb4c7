#!/usr/bin/env bash
# Sourced by the other scripts: apt_install PACKAGE... installs Debian packages that a
# test needs and pip cannot provide (as root, or through sudo). Returns non-zero where
# there is no apt-get or the install fails; callers then say what is missing.
apt_install() {
  command -v apt-get >/dev/null || return 1
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo="sudo"
  fi
  $sudo apt-get update -qq >/dev/null \
    && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
