#!/usr/bin/env bash
# Set up and run the whole test suite (lint first). Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not slow" or scripts/test.sh tests/test_records.py
set -euo pipefail
source "$(dirname "$0")/_env.sh" test
source scripts/_postgres.sh
source scripts/_chromium.sh

ruff check .
python -m pytest "$@"
