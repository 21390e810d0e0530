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
    seconds = timed(step, a.iterations, a.side, turns, a.chunk, a.seconds, a.turns)
    log.write(f"seconds {{sum(seconds)}} {{len(seconds)}}\\n")
    print("a library's stray print")  # on stdout: must not be read as the protocol
    log.close()
    open(a.out, "w").write("done")
    turns.give()
    """
)


def _run(tmp_path: Path, fail_at: int = -1, seconds: float = 0.0) -> tuple[dict, dict]:
    script = tmp_path / "side.py"
    script.write_text(SIDE.format(benchmarks=str(BENCHMARKS), fail_at=fail_at))
    a = argparse.Namespace(iterations=10, chunk=3, seed=0, samples=1, torchgfn_debug=False, seconds=seconds, turns=4)
    outs = {side: tmp_path / side for side in ("torchgfn", "ours")}
    wall = run_sides(str(script), {"torchgfn": sys.executable, "ours": sys.executable}, a, outs)
    return wall, outs


def _steps(out: Path) -> list[list[str]]:
    """The ``time side k`` lines a side logged (its last line is its timed total)."""
    return [line.split() for line in Path(str(out) + ".log").read_text().splitlines() if not line.startswith("seconds")]


def test_sides_take_turns_in_abba_order(tmp_path):
    wall, outs = _run(tmp_path)
    assert all(out.read_text() == "done" for out in outs.values())
    events = sorted((int(t), side, int(k)) for out in outs.values() for t, side, k in _steps(out))
    chunks = [("torchgfn", range(0, 3)), ("ours", range(0, 3)), ("ours", range(3, 6)), ("torchgfn", range(3, 6)), ("torchgfn", range(6, 9)), ("ours", range(6, 9)), ("ours", range(9, 10)), ("torchgfn", range(9, 10))]
    assert [(side, k) for _, side, k in events] == [(side, k) for side, ks in chunks for k in ks]
    assert all(w > 4 * 0.003 for w in wall.values())  # each side's own turns: at least its 4 chunks of sleeps


def test_a_failing_side_fails_the_run(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        _run(tmp_path, fail_at=4)


def test_equal_wall_clock_gives_each_side_its_share_of_seconds_in_every_turn(tmp_path):
    wall, outs = _run(tmp_path, seconds=0.2)
    for out in outs.values():
        total, n = Path(str(out) + ".log").read_text().splitlines()[-1].split()[1:]
        # each side stops once its timed iterations reach 0.2 s: over by less than one 3 ms step (slack for a busy machine)
        assert 0.2 <= float(total) < 0.2 + 0.05 and int(n) >= 4
    events = sorted((int(t), side) for out in outs.values() for t, side, _ in _steps(out))
    runs = [side for i, (_, side) in enumerate(events) if i == 0 or events[i - 1][1] != side]
    assert runs == ["torchgfn", "ours", "torchgfn", "ours", "torchgfn"]  # four turns each, ABBA: the middle pairs merge
