"""`--seeds` takes the forms every seed list takes (issue 55): a count N (seeds 0..N-1, as its
help says), a comma list, inclusive ranges `a-b`; a bad one is one line naming `--seeds`."""

from __future__ import annotations

import pytest

from shapesweep.common import UserError
from shapesweep.search_spaces.seeds import parse_measure_seeds
from shapesweep.sweep.cli.main import main
from shapesweep.sweep.options.option_groups import seeds_list


@pytest.mark.parametrize(("text", "seeds"), [
    ("3", [0, 1, 2]), ("1", [0]), ("0,3,7", [0, 3, 7]), ("0-2", [0, 1, 2]), ("0-0", [0]),
    ("5", [0, 1, 2, 3, 4]), ("0-2,5", [0, 1, 2, 5]), (" 4 - 6 , 9", [4, 5, 6, 9]), ("7,", None),
])
def test_seed_forms(text, seeds):
    if seeds is None:  # a trailing comma is no seed
        with pytest.raises(UserError, match="--seeds"):
            seeds_list(text)
        return
    assert seeds_list(text) == seeds
    assert parse_measure_seeds(text) == seeds


@pytest.mark.parametrize(("text", "words"), [
    ("0", "N means seeds 0..N-1"), ("2-1", "ends before it starts"), ("0-2,1", "given twice"),
    ("a-b", "cannot read"), ("0-99999999", "more than"), ("min=1,max=8", "start at 2 or more"),
    ("min=3,max=2", "less than min"),
])
def test_bad_seeds_are_one_line_naming_the_flag(text, words, capsys):
    with pytest.raises(UserError, match=words) as caught:
        seeds_list(text)
    assert caught.value.key == "--seeds" or "--seeds" in str(caught.value)
    assert main(["plan", "demo-quick", "--seeds", text]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--seeds" in err and words in err, err


def test_the_help_says_what_n_means(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "N means seeds 0..N-1" in help_text
    assert "0-2" in help_text


def test_a_range_gives_as_many_seeds_as_its_list(capsys):
    assert main(["plan", "demo-quick", "--seeds", "0-1"]) == 0
    ranged = capsys.readouterr().out
    assert main(["plan", "demo-quick", "--seeds", "0,1"]) == 0
    assert "+ 2 measure seeds" in ranged
    assert ranged == capsys.readouterr().out
