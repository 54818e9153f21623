#!/usr/bin/env bash
# Installs the attune Python package into PYTHON (default: the python3 on
# PATH) from an existing build tree, without rebuilding it: the wheel is
# made with that tree as scikit-build-core's build directory and its own
# settings, so CMake finds everything up to date.
# Usage: tools/python_install.sh BUILD_DIR [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:?usage: tools/python_install.sh BUILD_DIR [PYTHON]}"
python="${2:-$(command -v python3)}"
cache="$build_dir/CMakeCache.txt"
[ -f "$cache" ] || { echo "python_install: $build_dir is not a configured build tree" >&2; exit 1; }
setting() { sed -n "s/^$1:[A-Z]*=//p" "$cache"; }
args=(-Cbuild-dir="$build_dir" -Ccmake.build-type="$(setting CMAKE_BUILD_TYPE)")
for option in ATTUNE_BUILD_TESTS ATTUNE_BUILD_BENCHMARKS ATTUNE_WERROR; do
  value="$(setting "$option")"
  [ -n "$value" ] && args+=(-Ccmake.define."$option"="$value")
done
pip_flags=()
if "$python" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
  # Debian's own python3 refuses pip installs unless told (PEP 668).
  if [ -f "$("$python" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
    pip_flags+=(--break-system-packages)
  fi
fi
echo "python_install: attune into $python from $build_dir"
"$python" -m pip install --quiet "${pip_flags[@]}" "${args[@]}" .
