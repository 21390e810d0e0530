"""The benchmarks' side-by-side harness: the two children take turns (ABBA), never overlap, and a failing side fails the run."""
import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from peer import run_sides  # noqa: E402

pytestmark = pytest.mark.slow  # child processes that sleep in turns: about 5 s a test

SIDE = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {benchmarks!r})
    from peer import Turns, parser, timed
    a = parser("a side", 1, "unused", "unused").parse_args()
    turns = Turns()
    log = open(a.out + ".log", "w")
    def step(k):
        if k == {fail_at}:
            raise RuntimeError("this side fails")
        log.write(f"{{time.monotonic_ns()}} {{a.side}} {{k}}\\n")
        time.sleep(0.003)
        return 0.0
    timed(step, a.iterations, a.side, turns, a.chunk)
    print("a library's stray print")  # on stdout: must not be read as the protocol
    log.close()
    open(a.out, "w").write("done")
    turns.give()
    """
)


def _run(tmp_path: Path, fail_at: int = -1) -> tuple[dict, dict]:
    script = tmp_path / "side.py"
    script.write_text(SIDE.format(benchmarks=str(BENCHMARKS), fail_at=fail_at))
    a = argparse.Namespace(iterations=10, chunk=3, seed=0, samples=1, torchgfn_debug=False)
    outs = {side: tmp_path / side for side in ("torchgfn", "ours")}
    wall = run_sides(str(script), {"torchgfn": sys.executable, "ours": sys.executable}, a, outs)
    return wall, outs


def test_sides_take_turns_in_abba_order(tmp_path):
    wall, outs = _run(tmp_path)
    assert all(out.read_text() == "done" for out in outs.values())
    events = sorted((int(t), side, int(k)) for out in outs.values() for t, side, k in (line.split() for line in Path(str(out) + ".log").read_text().splitlines()))
    chunks = [("torchgfn", range(0, 3)), ("ours", range(0, 3)), ("ours", range(3, 6)), ("torchgfn", range(3, 6)), ("torchgfn", range(6, 9)), ("ours", range(6, 9)), ("ours", range(9, 10)), ("torchgfn", range(9, 10))]
    assert [(side, k) for _, side, k in events] == [(side, k) for side, ks in chunks for k in ks]
    assert all(w > 4 * 0.003 for w in wall.values())  # each side's own turns: at least its 4 chunks of sleeps


def test_a_failing_side_fails_the_run(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        _run(tmp_path, fail_at=4)
