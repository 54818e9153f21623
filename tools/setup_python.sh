#!/usr/bin/env bash
# Installs what the attune Python package and its tests need into PYTHON
# (default: the python3 on PATH, the one users run): NumPy, PyTorch, pytest,
# scikit-build-core (what `pip install .` builds with) and Hugging Face
# transformers (attune.transformers and its tests), from PyPI.
# Idempotent: what is already there is left alone.
# Usage: tools/setup_python.sh [PYTHON]
set -euo pipefail
python="${1:-$(command -v python3)}"
# PyTorch from PyPI is its CUDA build (with NVIDIA's runtime libraries, about
# 3 GB); it runs on the CPU as well. Pinned so CI is repeatable; the package
# itself works with any PyTorch from 2.4 on (docs/python.md).
torch_pin="${ATTUNE_TORCH_VERSION:-2.9.1}"
# transformers is pure Python; pip brings its dependencies (tokenizers,
# safetensors, huggingface_hub, ...: docs/dependencies.md). Pinned like torch
# for CI; an installed transformers 5.x is left alone.
transformers_pin="${ATTUNE_TRANSFORMERS_VERSION:-5.25.0}"
wanted=()
"$python" -c 'import numpy' 2>/dev/null || wanted+=(numpy)
"$python" -c 'import pytest' 2>/dev/null || wanted+=(pytest)
"$python" -c 'import scikit_build_core' 2>/dev/null || wanted+=("scikit-build-core>=0.10")
"$python" - <<'PY' 2>/dev/null || wanted+=("transformers==$transformers_pin")
import transformers
raise SystemExit(0 if int(transformers.__version__.split(".")[0]) >= 5 else 1)
PY
"$python" - <<'PY' 2>/dev/null || wanted+=("torch==$torch_pin")
import torch
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
raise SystemExit(0 if (major, minor) >= (2, 4) else 1)
PY
if ((${#wanted[@]} == 0)); then
  echo "setup_python: numpy, pytest, scikit-build-core, torch and transformers present in $python"
  exit 0
fi
# --no-compile: no .pyc for torch's thousands of modules up front (a minute
# of CPU beside the C++ build); Python compiles what it imports, once.
flags=(--quiet --disable-pip-version-check --no-compile)
stdlib="$("$python" -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')"
# Debian's own python3 refuses pip installs unless told (PEP 668).
if [ -f "$stdlib/EXTERNALLY-MANAGED" ]; then flags+=(--break-system-packages); fi
echo "setup_python: installing ${wanted[*]} into $python"
"$python" -m pip install "${flags[@]}" "${wanted[@]}"
