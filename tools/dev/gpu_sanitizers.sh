#!/usr/bin/env bash
# The sanitizer suites (ASan+UBSan, TSan) on the GPU machine's 16+ cores,
# where they take minutes instead of an hour on 2 cores. It has a compiler
# and cmake but no glog/gflags/gtest/Boost, so `pack` (here) copies their
# headers and static libraries into gpu_sanroot/ (ignored by git; name it
# in the device tool's carry) and `run` (there) builds and tests with them.
#   tools/dev/gpu_sanitizers.sh pack
#   tools/dev/gpu_sanitizers.sh run asan|tsan [ctest args...]   (on the GPU machine)
set -u
R=gpu_sanroot
case "${1:-}" in
  pack)
    set -e
    rm -rf "$R" && mkdir -p "$R/include" "$R/lib"
    cp -r /usr/include/{glog,gflags,gtest,gmock} "$R/include/"
    # Only the Boost headers the lock-free queues pull in (CMake looks for
    # spsc_queue.hpp; the null NIC uses queue.hpp).
    printf '#include <boost/lockfree/queue.hpp>\n#include <boost/lockfree/spsc_queue.hpp>\n' |
      g++ -std=c++17 -M -x c++ - | tr ' \\' '\n\n' | grep /usr/include/boost |
      sort -u | while read -r f; do
        d="$R/include/${f#/usr/include/}"
        mkdir -p "$(dirname "$d")" && cp "$f" "$d"
      done
    cp /usr/lib/x86_64-linux-gnu/lib{glog,gflags,gtest,gtest_main,gmock}.a "$R/lib/"
    EXCL="$(git rev-parse --git-dir)/info/exclude"
    grep -qx "$R" "$EXCL" 2>/dev/null || echo "$R" >>"$EXCL"
    du -sh "$R"
    ;;
  run)
    SAN=${2:?asan or tsan}
    shift 2
    OUT=${OUT:-/tmp}
    export PATH=/opt/torch/.venv/bin:$PATH
    B=build-$SAN-gpu
    t0=$(date +%s)
    # The GPU machine's newer GCC warns (-Werror) inside libstdc++ and
    # gtest headers where the dev machine's does not: keep those warnings.
    cmake -S . -B "$B" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$R" \
      -DUCCL_SANITIZE="$SAN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUCCL_CUDA=OFF \
      "-DCMAKE_CXX_FLAGS=-Wno-error=maybe-uninitialized -Wno-error=array-bounds -Wno-error=stringop-overflow" \
      >"$OUT/$SAN-cmake.log" 2>&1 || { tail -30 "$OUT/$SAN-cmake.log"; exit 1; }
    ninja -C "$B" >"$OUT/$SAN-build.log" 2>&1 ||
      { grep -B5 -A20 "error\|FAILED" "$OUT/$SAN-build.log" | head -80; exit 1; }
    echo "== $SAN build $(($(date +%s) - t0)) s"
    t0=$(date +%s)
    export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp"
    (cd "$B" && ctest -j10 --timeout 900 "$@") >"$OUT/$SAN-ctest.log" 2>&1
    rc=$?
    echo "== $SAN ctest rc=$rc in $(($(date +%s) - t0)) s"
    grep -E "tests passed|\*\*\*Failed|\*\*\*Timeout|Skipped" "$OUT/$SAN-ctest.log" | sort -u | head -20
    exit $rc
    ;;
  *)
    sed -n 2,8p "$0"
    exit 2
    ;;
esac
