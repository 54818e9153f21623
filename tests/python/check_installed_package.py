#!/usr/bin/env python3
"""The package installed by tools/python_install.sh (pip install .), as a
user meets it: `import attune` from anywhere, its own libattune.so and CLI,
the README's one-liner on the emulator. Skips (77) where it is not
installed, unless ATTUNE_REQUIRE_TORCH=1 (CI)."""
import importlib.util
import os
import subprocess
import sys
import sysconfig

required = os.environ.get("ATTUNE_REQUIRE_TORCH") == "1"
if importlib.util.find_spec("attune") is None or importlib.util.find_spec("torch") is None:
    print("attune or torch is not installed in", sys.executable, "(tools/python_install.sh, tools/setup.sh)")
    sys.exit(1 if required else 77)

import attune  # noqa: E402
import torch  # noqa: E402

here = os.path.dirname(os.path.abspath(attune.__file__))
assert attune.library_path().startswith(here), f"the library comes from {attune.library_path()}, not {here}"
out = attune.flash_attn_func(torch.randn(1, 37, 2, 64, dtype=torch.bfloat16),
                             *[torch.randn(1, 50, 2, 64, dtype=torch.bfloat16)] * 2, causal=True)
assert tuple(out.shape) == (1, 37, 2, 64), out.shape
script = os.path.join(sysconfig.get_path("scripts"), "attune")  # the console script pip installed
cli = subprocess.run([script, "variants", "list", "--op", "fwd", "--dk", "64", "--dv", "64"], capture_output=True,
                     text=True)
assert cli.returncode == 0 and "flash_fwd/" in cli.stdout, cli.stderr
print("ok: attune", attune.__version__, "from", here, "-> out", tuple(out.shape), "; the attune command works")
