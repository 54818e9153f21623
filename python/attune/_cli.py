"""The `attune` command installed with the package: runs the bundled CLI."""
import os
import sys

from . import _native


def main():
    path = _native.cli_path()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
