#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# image.sh: builds docker/Dockerfile with podman, offline if need be, as
# TAG (default localhost/ratelimitd:latest). The base debian:bookworm-slim is
# used if present (`podman pull debian:bookworm-slim` where a registry is
# reachable); else it is made from Debian's archive (tools/rootfs.sh:
# mmdebstrap --variant=minbase bookworm), slimmed as Debian's -slim images
# are (no documentation but the copyright files, no man pages, no
# translations, and a dpkg rule that keeps later installs so), and imported
# under the name the Dockerfile's FROM resolves to.
# --isolation=chroot: where containers cannot run (no cgroups, setrlimit
# refused) a chroot build still does; then the ulimits must be given.
# --format docker: an OCI image would drop the HEALTHCHECK.
# Usage: sh tools/image.sh [TAG]
set -eu
cd "$(dirname "$0")/.."
tag=${1:-localhost/ratelimitd:latest}
base=docker.io/library/debian:bookworm-slim
command -v podman >/dev/null || { echo "image.sh: install podman" >&2; exit 2; }
if ! podman image exists "$base"; then
    echo "image.sh: no $base here: importing a minbase root made by tools/rootfs.sh"
    tar=$(sh tools/rootfs.sh)
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    tar -C "$root" -xf "$tar"
    cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
    find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
        "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | podman import --quiet - "$base" >/dev/null
fi
podman build --quiet --isolation=chroot --format docker \
    --ulimit nproc=4096:4096 --ulimit nofile=4096:4096 \
    -f docker/Dockerfile -t "$tag" .
