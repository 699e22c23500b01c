#!/usr/bin/env bash
# Installs what the registry tests (tests/e2e/tests/registry.rs) need, and
# only what is missing: Debian's docker-registry (the CNCF distribution
# registry, which each test starts on loopback with TLS and basic auth and
# stops by its pid) and openssl (which makes the tests' CA and server
# certificate). The package's own service is not used: the tests run their
# own registry, each on a free loopback port, with state in a temp dir.
set -euo pipefail

missing=()
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -eq 0 ]; then
    echo "registry tests: docker-registry and openssl are installed"
    exit 0
fi
echo "registry tests: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
lock=(-o DPkg::Lock::Timeout=600)
if ! apt-get "${lock[@]}" install -y --no-install-recommends "${missing[@]}"; then
    apt-get "${lock[@]}" update
    apt-get "${lock[@]}" install -y --no-install-recommends "${missing[@]}"
fi
command -v docker-registry >/dev/null
