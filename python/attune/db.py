"""The tuning database from Python, through the CLI (`attune db ...`; the
SQL stays in tuning_db/):

    d = attune.db.open()             # the default database, or open(path)
    for row in d.best(): print(row["problem_key"], row["variant"], row["median_ms"])
    d.verify()                       # raises when the database is unsound
    d.merge(["shard0.db", "shard1.db"])
    d.export("all.json")             # or export() -> the JSON document
"""
import json
import os
import subprocess

from . import _native as native
from ._errors import Error, IoError


def default_path():
    """$ATTUNE_TUNING_DB, else $XDG_DATA_HOME/attune/tuning.db, else
    ~/.local/share/attune/tuning.db: where `attune tune` writes."""
    explicit = os.environ.get("ATTUNE_TUNING_DB", "")
    if explicit:
        return explicit
    data = os.environ.get("XDG_DATA_HOME", "") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "attune", "tuning.db")


class Database:
    def __init__(self, path):
        self.path = os.fspath(path)

    def __repr__(self):
        return f"attune.db.Database({self.path!r})"

    def _cli(self, *args):
        r = subprocess.run([native.cli_path(), "db", "--db", self.path, *args], capture_output=True, text=True)
        if r.returncode != 0:
            message = (r.stderr.strip() or r.stdout.strip()).splitlines()
            raise Error(message[-1] if message else f"attune db {' '.join(args)} failed with exit {r.returncode}")
        return r.stdout

    def _rows(self, what):
        return json.loads(self._cli(what, "--format", "json"))

    def best(self):
        """The best variant per device and problem key: dicts with device,
        problem_key, variant, median_ms and gain (over the heuristic's
        default, None where it was not measured)."""
        return self._rows("best")

    def devices(self):
        """Dicts with device and tuned_problem_keys."""
        return self._rows("devices")

    def problems(self):
        """The measured problem keys: dicts with device, problem_key,
        measurements and failed."""
        return self._rows("problems")

    def verify(self):
        """Checks integrity (best rows agree with the measurements); returns
        the CLI's report line, raises attune.Error listing the problems."""
        return self._cli("verify").strip()

    def merge(self, others):
        """Copies the rows of other databases (shards) into this one, the
        first winning a conflict; returns the CLI's summary."""
        others = [os.fspath(o) for o in ([others] if isinstance(others, (str, os.PathLike)) else others)]
        return self._cli("merge", *others).strip()

    def export(self, path=None, format="json"):
        """Every measurement: written to `path` as JSON or CSV, or returned
        (JSON: the parsed document; CSV: the text)."""
        if format not in ("json", "csv"):
            raise ValueError(f"format: got {format!r}; expected json or csv")
        if path is not None:
            self._cli("export", "--format", format, "--out", os.fspath(path))
            return os.fspath(path)
        text = self._cli("export", "--format", format)
        return json.loads(text) if format == "json" else text


def open(path=None):  # noqa: A001 (the name users expect)
    """The tuning database at `path` (None: the default path). It must
    exist: `attune tune` (or attune.tune) creates it."""
    path = os.fspath(path) if path is not None else default_path()
    if not os.path.exists(path):
        raise IoError(f"{path}: no tuning database there; run attune.tune() or 'attune tune' first")
    return Database(path)
