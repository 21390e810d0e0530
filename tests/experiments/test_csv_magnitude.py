"""A CSV whose values cannot be scored in float64 (a cell of 1e308, every value times 1e300) is refused when it is read:
one line naming the file, the column and the row, before the run folder is touched (issue 64, item 8). Before, the
run started, wrote config.json, and stopped on a ``LinAlgError`` traceback (the Cholesky factor of an infinite Gram matrix)."""

import numpy as np
import pytest
import torch

from gflownet_measure.experiments.cli import main
from gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files import SUM_OF_SQUARES_LIMIT, load_csv, load_data

pytestmark = pytest.mark.usefixtures("one_thread")


def _csv(path, x: np.ndarray, names=("a", "b", "c")) -> str:
    path.write_text(",".join(names) + "\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in x) + "\n")
    return str(path)


@pytest.fixture
def data() -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(30, 3))
    x[:, 2] += 0.8 * x[:, 0]
    return x


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda x: x.__setitem__((4, 1), 1e308), r"cell '1e\+308' in column 'b', data row 5 of .* too large to score in float64"),
        (lambda x: x.__imul__(1e300), r"cell '.*e\+29\d' in column 'a', data row 1 of .* too large to score in float64"),
        (lambda x: x.__setitem__((7, 2), -2e150), r"cell '-2e\+150' in column 'c', data row 8 of .*at most 1e150 in magnitude"),
        (lambda x: x.__setitem__((slice(10, 13), 0), 9e149), r"the squares of column 'a' sum past 1e\+300 at data row 12 of "),
    ],
)
def test_values_too_large_to_score_are_named_by_column_and_row(tmp_path, data, edit, message):
    edit(data)
    with pytest.raises(ValueError, match=message) as e:
        load_csv(_csv(tmp_path / "big.csv", data))
    assert "\n" not in str(e.value) and "big.csv" in str(e.value) and "rescale the column" in str(e.value)


def test_the_limit_is_a_sum_of_squares_and_constant_or_tiny_columns_are_data(tmp_path, data):
    data[:, 0] = 5.0  # constant: no model divides by a column's spread
    data[:, 1] *= 1e-300  # tiny: squares underflow to 0, harmlessly
    data[:, 2] *= np.sqrt(0.99 * SUM_OF_SQUARES_LIMIT / np.square(data[:, 2]).sum())  # just inside the limit
    x, names = load_csv(_csv(tmp_path / "ok.csv", data))
    assert torch.isfinite((x.T @ x) / 1e-8).all()  # the Gram matrix over the smallest obs_var a run accepts


def test_an_intervention_column_is_no_variable_but_the_rows_are_counted_alike(tmp_path, data):
    data[6, 1] = 1e200
    path = tmp_path / "interventional.csv"
    path.write_text("intervention,a,b\n" + "\n".join(f"{'a' if n % 3 == 0 else ''},{a!r},{b!r}" for n, (a, b, _) in enumerate(data.tolist())) + "\n")
    with pytest.raises(ValueError, match=r"cell '1e\+200' in column 'b', data row 7 of "):
        load_data(path)


@pytest.mark.parametrize("scale", ["cell", "all"])
def test_the_command_line_refuses_it_in_one_line_and_writes_no_folder(tmp_path, data, scale, capsys):
    if scale == "cell":
        data[4, 1] = 1e308
    else:
        data *= 1e300
    out = tmp_path / "run"
    assert main(["run", "jsp-gfn", "--preset", "quick", "--threads", "1", "--out", str(out), "--set", f"data={_csv(tmp_path / 'big.csv', data)}"]) == 2
    err = capsys.readouterr().err.strip()
    column, row = ("'b'", "data row 5") if scale == "cell" else ("'a'", "data row 1")
    assert "\n" not in err and err.startswith("gflownet-measure: error: load_csv: cell ") and column in err and row in err, err
    assert not out.exists()
