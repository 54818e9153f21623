"""What the CLI tests share: a list of checks that prints and counts, a
runner for the attune command, and the mask of the contract in NumPy (an
independent statement of docs/contract.md, not the C++)."""
import contextlib
import os
import subprocess
import sys
import tempfile

import numpy as np


class Checks:
    """Each check prints one line; finish() prints the totals and gives the exit status."""

    def __init__(self):
        self.passed = 0
        self.failures = []

    def check(self, ok, what):
        print("%s %s" % ("ok  " if ok else "FAIL", what))
        if ok:
            self.passed += 1
        else:
            self.failures.append(what)
        return ok

    def result(self, name, why):
        """A check whose outcome is None (passed) or the reason it failed."""
        return self.check(why is None, name if why is None else "%s: %s" % (name, why))

    def append(self, named):
        """A (name, None or why it failed) pair, as a list of results takes it."""
        self.result(*named)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, len(self.failures)))
        return 1 if self.failures else 0


def runner(attune, timeout=300):
    """run(*args): the command's CompletedProcess, output captured as text."""
    return lambda *args: subprocess.run([attune] + list(args), capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def cli_test(prefix):
    """What a test run as `NAME_test.py PATH_TO_ATTUNE [PATH ...]` works with:
    its arguments as absolute paths, a Checks, and a scratch directory named
    with `prefix`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield [os.path.abspath(arg) for arg in sys.argv[1:]], Checks(), tmp


def database_test(test, prefix, timeout):
    """main() of a test run as `NAME_test.py PATH_TO_ATTUNE` on one new tuning
    database: test(check, run, db) with run(*args) running that attune; exits
    with the checks' status."""
    with cli_test(prefix) as ((attune,), checks, tmp):
        test(checks.check, runner(attune, timeout=timeout), os.path.join(tmp, "t.db"))
    sys.exit(checks.finish())


def visible(sq, sk, causal, window):
    """[sq, sk] booleans: which keys each query row sees. Bottom-right causal
    aligns the last row with the last key; top-left the first with the
    first; a window (left, right) counts in the bottom-right frame."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    off = sk - sq
    vis = np.ones((sq, sk), dtype=bool)
    if causal == "bottom-right":
        vis &= j <= i + off
    elif causal == "top-left":
        vis &= j <= i
    if window is not None:
        left, right = window
        if left >= 0:
            vis &= j >= i + off - left
        if right >= 0:
            vis &= j <= i + off + right
    return vis
