"""The run's records on disk: a step's JSON record read back, and files
written atomically (a temporary file, fsync, rename), so a reader or a kill
at any moment sees the old file or the new one, never half of one."""
import json
import os


def load(work, name):
    """WORK/NAME.json, or None when it is missing or unreadable."""
    try:
        with open(os.path.join(work, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def atomic_write(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
