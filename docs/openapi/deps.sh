#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deps.sh: installs the pinned OpenAPI linter (@redocly/cli, exactly as
# docs/openapi/package-lock.json locks it) that tests/integration/test_openapi.py
# runs on docs/openapi.yaml; called by tools/test.sh after
# deploy/test/deps.sh, which installs node and npm.
set -eu
cd "$(dirname "$0")"
# npm ci only when the lock changed since the last install; no install
# scripts run.
if ! cmp -s package-lock.json node_modules/.installed-lock.json 2>/dev/null; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.installed-lock.json
fi
