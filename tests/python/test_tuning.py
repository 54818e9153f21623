"""Tuning from Python: record the problems a model dispatches, tune them with
the CLI's tuner (isolated workers) on the emulator into a database, and the
same process then dispatches the tuned variants; the database from Python."""
import pytest
import torch

import attune
from conftest import randn


class Model(torch.nn.Module):
    def forward(self, q, k, v):
        return attune.flash_attn_func(q, k, v, causal=True)


@pytest.fixture
def tuned_db(tmp_path):
    q, k, v = (randn(1, 64, 2, 64, seed=s) for s in (1, 2, 3))
    with attune.record() as r:
        Model()(q, k, v)
        Model()(q, k, v)  # the same problem twice: recorded once
    assert len(r.problems) == 1
    p = r.problems[0]
    assert (p.op, p.dtype, p.seqlen_q, p.heads_q, p.head_dim_k, p.mask) == ("fwd", "bf16", 64, 2, 64, "causal")
    path = tmp_path / "tuning.db"
    before = attune.explain(q, k, v, causal=True)
    assert before.rule == "heuristic"
    sweeps = attune.tune(r.problems, backend="emu", db=path, max_variants=2, progress=False,
                         extra_args=["--repetitions", "1", "--warmup", "0"])
    assert sweeps == 1
    yield path, (q, k, v)
    attune.set_tuning_db(None)


def test_after_tuning_this_process_dispatches_the_tuned_variant(tuned_db):
    path, (q, k, v) = tuned_db
    choice = attune.explain(q, k, v, causal=True)
    assert choice.rule == "tuned", choice
    assert choice.variant.split("/")[0] in ("flash_fwd", "flash_fwd_sm90"), choice
    best = attune.db.open(path).best()
    assert [row["variant"] for row in best] == [choice.variant]


def test_the_database_from_python(tuned_db, tmp_path):
    path, _ = tuned_db
    d = attune.db.open(path)
    assert d.devices() == [{"device": "attune-emulator/cpu", "tuned_problem_keys": 1}]
    problems = d.problems()
    assert len(problems) == 1 and problems[0]["measurements"] == 2 and problems[0]["failed"] == 0
    assert "ok" in d.verify()
    doc = d.export()
    assert doc["format"] == "attune.measurements" and len(doc["measurements"]) == 2
    out = d.export(tmp_path / "all.csv", format="csv")
    assert open(out).read().startswith("device,") or "," in open(out).readline()
    # merging a shard into a new database carries its results over
    merged = attune.db.Database(tmp_path / "merged.db")
    merged.merge([path])
    assert [row["variant"] for row in merged.best()] == [row["variant"] for row in d.best()]
    with pytest.raises(attune.IoError, match="no tuning database"):
        attune.db.open(tmp_path / "missing.db")


def test_sweeps_cover_what_was_recorded_and_say_what_they_skip():
    from attune._record import Problem
    from attune._tuning import sweeps

    files, skipped = sweeps([Problem("fwd", "bf16", 2, 100, 100, 8, 2, 128, 128, "causal"),
                             Problem("fwd", "bf16", 1, 3000, 3000, 8, 2, 128, 128, "causal"),
                             Problem("fwd", "fp32", 1, 8, 8, 2, 2, 16, 16, "none"),
                             Problem("fwd", "bf16", 1, 8, 8, 2, 2, 64, 32, "none")])
    assert len(files) == 1
    assert "seqlens = 128, 4096" in files[0] and "batch_heads = 1x8, 2x8" in files[0]
    assert len(skipped) == 2
