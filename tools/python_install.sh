#!/usr/bin/env bash
# Installs the attune Python package into PYTHON (default: the python3 on
# PATH) from an existing build tree, without rebuilding it: `pip install .`
# with that tree as scikit-build-core's build directory and its own
# settings, so CMake finds everything up to date and only installs.
# Usage: tools/python_install.sh BUILD_DIR [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:?usage: tools/python_install.sh BUILD_DIR [PYTHON]}"
python="${2:-$(command -v python3)}"
cache="$build_dir/CMakeCache.txt"
[ -f "$cache" ] || { echo "python_install: $build_dir is not a configured build tree" >&2; exit 1; }
setting() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
args=(-Cbuild-dir="$build_dir" -Ccmake.build-type="$(setting CMAKE_BUILD_TYPE)")
for option in ATTUNE_BUILD_TESTS ATTUNE_BUILD_BENCHMARKS ATTUNE_WERROR ATTUNE_PACKAGE_PYTHON; do
  value="$(setting "$option")"
  if [ -n "$value" ]; then args+=(-Ccmake.define."$option"="$value"); fi
done
pip_flags=(--quiet --disable-pip-version-check)
stdlib="$("$python" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
# Debian's own python3 refuses pip installs unless told (PEP 668).
if [ -f "$stdlib/EXTERNALLY-MANAGED" ]; then pip_flags+=(--break-system-packages); fi
echo "python_install: attune into $python from $build_dir"
"$python" -m pip install "${pip_flags[@]}" "${args[@]}" .
