#!/usr/bin/env bash
# Makes `import uccl.p2p` work without PYTHONPATH: a .pth file naming the
# build's python/ folder, in the interpreter's site-packages (make
# install-python); --uninstall removes it. The module stays in the build.
# Usage: tools/install_python.sh BUILD_DIR [--uninstall]
# Env: PYTHON (default: the interpreter the build found, whose ABI the
# module has), PY_SITE (default: that interpreter's purelib folder).
set -euo pipefail
BUILD=${1:?usage: install_python.sh BUILD_DIR [--uninstall]}
found=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' \
  "$BUILD/CMakeCache.txt" 2>/dev/null | head -1 || true)
PY=${PYTHON:-${found:-python3}}
SITE=${PY_SITE:-$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')}
PTH="$SITE/uccl-build.pth"
if [ "${2:-}" = "--uninstall" ]; then
  rm -f "$PTH"
  echo "removed $PTH"
  exit 0
fi
if [ ! -d "$BUILD" ]; then
  echo "install_python: no build folder $BUILD (build first: make python)" >&2
  exit 1
fi
MOD=$(cd "$BUILD" && pwd)/python
if ! ls "$MOD"/uccl/_p2p*.so >/dev/null 2>&1; then
  echo "install_python: no module in $MOD (build first: make python)" >&2
  exit 1
fi
mkdir -p "$SITE"
echo "$MOD" >"$PTH"
echo "installed $PTH -> $MOD"
echo "check: $PY -c 'import uccl.p2p'"
