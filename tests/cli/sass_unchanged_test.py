#!/usr/bin/env python3
"""Score modifiers cost nothing when unused: variants without them compile
to the SASS they compiled to before modifiers existed.

Usage: python3 sass_unchanged_test.py PATH_TO_ATTUNE DATA_FILE

For each line of DATA_FILE (tests/cli/data/sass_before_modifiers.txt: arch,
dtype, variant id, digest of the SASS instructions from the templates before
modifiers), `attune variants dump ID --arch A --dtype D --out DIR` compiles
the variant with NVRTC; nvdisasm turns its cubin into SASS, and the
instruction lines (whitespace collapsed, the mangled kernel name replaced)
must hash to the same digest. The same variant with softcap or dropout
compiled in must not (so the comparison can fail). Exits 77 (skipped) without NVRTC or
nvdisasm.

The digests are a snapshot: a change to a kernel that is meant to change its
code without modifiers (new features at run time, such as packed queries in
flash_decode) regenerates them with --update (then say why in the file's
header and the commit), and the test goes on guarding the next change.
"""
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

from cli_support import Checks

SKIP = 77


def find_nvdisasm():
    candidates = [os.environ.get("ATTUNE_NVDISASM", ""), shutil.which("nvdisasm") or "",
                  os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm"),
                  os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "attune", "tools",
                               "bin", "nvdisasm")]
    candidates += glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "nvidia", "*", "bin",
                                         "nvdisasm"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def instructions(sass):
    """The instruction lines of nvdisasm's output, normalized."""
    out = []
    for line in sass.splitlines():
        if re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+[A-Z@{]", line):
            out.append(re.sub(r"_ZN6attune\w*", "KERNEL", re.sub(r"\s+", " ", line.strip())))
    return out


def digest_of(attune, nvdisasm, variant, arch, dtype, tmp):
    out = tempfile.mkdtemp(dir=tmp)
    res = subprocess.run([attune, "variants", "dump", variant, "--arch", arch, "--dtype", dtype, "--out", out],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        return None, "dump failed: " + res.stderr.strip()[:300]
    sass = subprocess.run([nvdisasm, os.path.join(out, "kernel.cubin")], capture_output=True, text=True,
                          check=True).stdout
    lines = instructions(sass)
    return (hashlib.sha256("\n".join(lines).encode()).hexdigest(), len(lines)), None


def update(attune, nvdisasm, data):
    """Rewrites the digests of DATA_FILE from the current templates."""
    lines = open(data).read().splitlines()
    with tempfile.TemporaryDirectory(prefix="attune_sass_") as tmp:
        for i, line in enumerate(lines):
            if not line.strip() or line.startswith("#"):
                continue
            arch, dtype, variant, _, _ = line.split()
            got, why = digest_of(attune, nvdisasm, variant, arch, dtype, tmp)
            if why is not None:
                print("%s %s %s: %s" % (arch, dtype, variant, why))
                return 1
            lines[i] = "%s %s %s %s %d" % (arch, dtype, variant, got[0], got[1])
    open(data, "w").write("\n".join(lines) + "\n")
    return 0


def main():
    attune, data = os.path.abspath(sys.argv[1]), sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "--update":
        nvdisasm = find_nvdisasm()
        return update(attune, nvdisasm, data) if nvdisasm else SKIP
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("skipped: no nvdisasm (tools/setup.sh fetches it from PyPI)")
        return SKIP
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="attune_sass_") as tmp:
        rows = [line.split() for line in open(data) if line.strip() and not line.startswith("#")]
        for arch, dtype, variant, digest, count in rows:
            got, why = digest_of(attune, nvdisasm, variant, arch, dtype, tmp)
            if why is not None and "nvrtc" in why.lower() and checks.passed == 0:
                print("skipped: " + why)  # no NVRTC on this machine
                return SKIP
            if why is None and got != (digest, int(count)):
                why = "SASS differs from before modifiers: %d instructions (before: %s)" % (got[1], count)
            checks.result("%s %s %s: the same SASS as before modifiers" % (arch, dtype, variant), why)
        # Planted differences: a feature compiled in changes the code (softcap;
        # dropout in each family that has it).
        for family, feature in (("flash_fwd/", "softcap1"), ("flash_fwd/", "dropout1"), ("flash_bwd/", "dropout1"),
                                ("flash_fwd_sm90/", "dropout1")):
            arch, dtype, variant, digest, _ = next(r for r in rows if r[2].startswith(family))
            got, why = digest_of(attune, nvdisasm, variant + "." + feature, arch, dtype, tmp)
            checks.check(why is None and got[0] != digest, "planted: %s.%s compiles to other SASS" % (variant, feature))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
