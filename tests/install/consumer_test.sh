#!/usr/bin/env bash
# install.consumer: installs the build tree, moves the installed tree (it
# must be relocatable), then builds and runs examples/consumer against it as
# an outside project would: with CMake (find_package(attune)) and with
# pkg-config. Fails on a missing file, a path of the build machine in the
# installed tree, or a wrong result.
#
#   consumer_test.sh BUILD_DIR SOURCE_DIR WORK_DIR VERSION BINDIR LIBDIR CMAKE GENERATOR MAKE_PROGRAM CC CXX PKG_CONFIG
set -euo pipefail
build_dir=$1 source_dir=$2 work=$3 version=$4 bindir=$5 libdir=$6
cmake=$7 generator=$8 make_program=$9 cc=${10} cxx=${11} pkg_config=${12}

fail() {
  echo "install.consumer: $*" >&2
  exit 1
}
step() { echo "install.consumer: $*"; }

rm -rf "$work"
mkdir -p "$work"
step "cmake --install $build_dir"
"$cmake" --install "$build_dir" --prefix "$work/installed" >"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "cmake --install failed"; }
mv "$work/installed" "$work/moved"
prefix="$work/moved"

for file in "$bindir/attune" "$libdir/libattune.so" include/attune/runtime/runtime.h include/attune/runtime/attune_c.h \
  "$libdir/cmake/attune/attuneConfig.cmake" "$libdir/cmake/attune/attuneConfigVersion.cmake" \
  "$libdir/pkgconfig/attune.pc"; do
  [ -f "$prefix/$file" ] || fail "$file is not installed (expected under the prefix; see cmake/install.cmake)"
done

# Nothing installed names the source or build tree (where the prefix was
# before the move, too).
if found=$(grep -rlF -e "$source_dir" -e "$build_dir" "$prefix"); then
  fail "installed files name the source or build tree ($source_dir, $build_dir): $found"
fi
# The programs find libattune.so beside them, and it needs no other attune file.
rel_lib=$(realpath -m --relative-to="/$bindir" "/$libdir")
for binary in "$bindir/attune" "$libdir/libattune.so"; do
  runpath=$(readelf -d "$prefix/$binary" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$runpath" = "\$ORIGIN/$rel_lib" ] || fail "$binary: RUNPATH '$runpath'; expected '\$ORIGIN/$rel_lib'"
  if readelf -d "$prefix/$binary" | grep '(NEEDED)' | grep -q '/'; then
    fail "$binary needs a library by path: $(readelf -d "$prefix/$binary" | grep '(NEEDED)')"
  fi
done
unset LD_LIBRARY_PATH
resolved=$(ldd "$prefix/$bindir/attune" | awk '$1 == "libattune.so" {print $3}')
[ "$(realpath "$resolved")" = "$(realpath "$prefix/$libdir/libattune.so")" ] ||
  fail "bin/attune loads libattune.so from '$resolved'; expected $prefix/$libdir/libattune.so"
"$prefix/$bindir/attune" --version >/dev/null || fail "the installed attune --version failed"

# The programs run on the emulator; no file of the user's is read or written.
export ATTUNE_CACHE_DIR="$work/cache" XDG_CACHE_HOME="$work/cache" XDG_DATA_HOME="$work/data"
unset ATTUNE_TUNING_DB
run() {
  local out
  out=$("$@") || fail "$* failed: $out"
  [ "$out" = ok ] || fail "$*: printed '$out'; expected 'ok'"
  echo "  $(basename "$1"): ok"
}

step "CMake: find_package(attune) from $prefix"
"$cmake" -S "$source_dir/examples/consumer" -B "$work/consumer" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_COMPILE_WARNING_AS_ERROR=ON >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log" >&2; fail "configuring examples/consumer failed"; }
found_dir=$(sed -n 's/^attune_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
[ "$found_dir" = "$prefix/$libdir/cmake/attune" ] ||
  fail "find_package(attune) found '$found_dir'; expected $prefix/$libdir/cmake/attune"
"$cmake" --build "$work/consumer" >>"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log" >&2; fail "building examples/consumer failed"; }
run "$work/consumer/consumer_c"
run "$work/consumer/consumer_plan"
run "$work/consumer/consumer_cpp"

step "pkg-config attune from $prefix/$libdir/pkgconfig"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
got=$("$pkg_config" --modversion attune) || fail "pkg-config does not find attune.pc"
[ "$got" = "$version" ] || fail "pkg-config --modversion attune: got '$got'; expected $version"
read -ra flags <<<"$("$pkg_config" --cflags --libs attune)"
rpath="-Wl,-rpath,$("$pkg_config" --variable=libdir attune)"
"$cc" "$source_dir/examples/consumer/consumer_c.c" "${flags[@]}" -lm "$rpath" -o "$work/consumer_c_pc" ||
  fail "cc consumer_c.c \$(pkg-config --cflags --libs attune) failed"
run "$work/consumer_c_pc"
"$cxx" -std=c++20 "$source_dir/examples/consumer/consumer_cpp.cpp" "${flags[@]}" "$rpath" -o "$work/consumer_cpp_pc" ||
  fail "c++ -std=c++20 consumer_cpp.cpp \$(pkg-config --cflags --libs attune) failed"
run "$work/consumer_cpp_pc"

# The installed library is the size of the build's: not kept once it passed.
rm -rf "$prefix"
step "ok"
