#!/usr/bin/env bash
# Installs the Debian packages UCCL needs to build, test and run; idempotent.
# Prints what it installs; runs `apt-get update` only when a package is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libgoogle-glog-dev libgflags-dev libboost-dev
  libgtest-dev libgmock-dev
  libibverbs-dev rdma-core ibverbs-utils
  pybind11-dev python3-dev python3-matplotlib python3-pytest python3-numpy
  iproute2 iptables procps clang-format
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Update package lists first, unless they were refreshed in the last day.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]; then
  echo "install_deps: apt-get update"
  $SUDO apt-get update -qq
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "install_deps: install failed; refreshing package lists and retrying"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install_deps: done"
