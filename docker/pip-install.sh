#!/bin/sh
# `pip install` inside an image build, with what docker/site/ gives this site:
# its CA bundle (ca/*.crt) and its wheels (wheels/), where present. The
# arguments are pip's. Every install of the images goes through here, without a
# cache, so that no downloaded file stays in a layer.
set -eu
for bundle in /opt/site/ca/*.crt; do
  if [ -f "$bundle" ]; then export PIP_CERT="$bundle"; fi
done
if [ -d /opt/site/wheels ]; then set -- --find-links /opt/site/wheels "$@"; fi
exec python -m pip install --no-cache-dir --disable-pip-version-check "$@"
