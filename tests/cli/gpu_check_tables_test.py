"""tools/gpu_check's scheduler table, from the results a GPU run's forward
step would hand it (no GPU: the table must be right the first time one is
lent)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "gpu_check"))
import plan  # noqa: E402
import steps  # noqa: E402


class Lines:
    def __init__(self):
        self.lines = []

    def text(self, *lines):
        self.lines += lines


def main():
    twins = plan.SCHEDULER_TWINS[128]
    assert len(twins) == 2 * len(plan.SCHEDULERS), twins
    flops = 2e12
    rows = {v: {"variant": v, "ms": 1.0 + i} for i, v in enumerate(twins) if not v.endswith(".sc0")}
    case = dict(plan.varlen_timing_case(128, "bf16", False))
    results = [{"status": "ok", "name": "time.d128.bf16.varlen", "job": {"case": case},
                "result": {"flops": flops, "rows": rows}},
               {"status": "failed", "name": "time.d128.bf16.full", "job": {"case": dict(case, cu_q=None)}}]
    st = Lines()
    steps.scheduler_table(st, results)
    table = [line for line in st.lines if line.startswith("| 128 |")]
    assert len(table) == 2, st.lines  # the 128 x 128 and 128 x 176 tiles of the one case that ran
    # 128 x 176 is twins 0..4 (ms 1..5; sc0 not timed), 128 x 128 twins 5..9 (ms 6..10).
    assert table[0] == "| 128 | bf16 | varlen | 128 x 128 | - | 286 | 250 | 222 | 200 |", table[0]
    assert table[1] == "| 128 | bf16 | varlen | 128 x 176 | - | 1000 | 667 | 500 | 400 |", table[1]
    header = [line for line in st.lines if line.startswith("| d |")]
    assert header == ["| d | dtype | case | tile | grid | static | dynamic | varlen | cluster |"], header
    # Packed sequences of unequal lengths, each its own keys; FLOPs per sequence.
    assert case["cu_q"][-1] == sum([8192, 512, 4096, 128, 2048, 1024, 300, 6000]) and case["mask"] == "causal"
    print("ok")


if __name__ == "__main__":
    main()
