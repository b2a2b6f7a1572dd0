"""What a space file may say, refused in one line where it says something wrong: no YAML
boolean where a number is meant (issue 57), a did-you-mean for a misspelt top-level key
(issue 55), and adaptive measure seeds `{min, max}` parsed and checked (issue 58)."""

from __future__ import annotations

import copy

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from shapesweep.common import UserError
from shapesweep.families.base import NUMERIC
from shapesweep.search_spaces.budget import Budget
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.configs import TrainConfig
from shapesweep.search_spaces.ranges import Range
from shapesweep.search_spaces.seeds import AdaptiveSeeds, parse_measure_seeds
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.cli.main import main
from tests.sweep_helpers import TINY_SPACE, write_space

SAMPLES = (1, 2, 0.5, 64, 4096)  # one of them is valid for every numeric field
CONTEXTS = ({}, {"decay": "wsd"})  # cooldown keys need decay: wsd


def numeric_fields(model: type[BaseModel], contexts: tuple[dict, ...]) -> list[str]:
    """The fields of `model` that take a number, found by trying: a sample number validates
    (in one of `contexts`) and is kept as a number, not turned into a boolean."""
    found = []
    for name in model.model_fields:
        for context in contexts:
            for sample in SAMPLES:
                try:
                    value = getattr(model.model_validate({**context, name: sample}), name)
                except ValidationError:
                    continue
                if isinstance(value, int | float) and not isinstance(value, bool):
                    found.append(name)
                    break
            else:
                continue
            break
    return found


def numeric_keys() -> list[tuple[str, str | None]]:
    """Every place in a space file where a number goes: (dotted key, the section to put it
    in). The space's schema decides the list; a few known keys check that it is found."""
    train = numeric_fields(TrainConfig, CONTEXTS)
    budget = numeric_fields(Budget, ({}, {"non_embedding_params": 1e6}))
    ranges = numeric_fields(Range, ({"min": 1, "max": 8, "num": 2}, {"min": 1, "max": 8, "step": 1}))
    assert {"steps", "tokens", "lr", "seq_len", "warmup_frac", "cooldown_frac"} <= set(train)
    assert {"non_embedding_params", "tolerance"} <= set(budget)
    assert {"min", "max", "num", "step"} <= set(ranges)
    dims = sorted({"d_model", "n_layers", "n_heads", "vocab_size"} & set(NUMERIC))
    assert dims == ["d_model", "n_heads", "n_layers", "vocab_size"]
    return ([f"train.{k}" for k in train] + [f"variants[0].train.{k}" for k in train]
            + [f"tune.{k}[0]" for k in train if k not in ("steps", "tokens", "tokens_per_param", "seed")]
            + [f"budget.{k}" for k in budget] + [f"variants[0].budget.{k}" for k in budget]
            + [f"search.n_layers.{k}" for k in ranges]
            + [f"fixed.{d}" for d in dims] + ["search.n_layers[1]", "budget.match.d_model",
                                              "round.d_h", "seeds[0]", "seeds.min", "seeds.max"])


def put(doc: dict, key: str, value: object) -> dict:
    """`doc` with `value` at the dotted `key` (`a.b[0].c`), made where missing."""
    doc = copy.deepcopy(doc)
    parts = key.replace("[", ".[").split(".")
    node: dict | list = doc
    for part, after in zip(parts, parts[1:] + [None], strict=True):
        index: int | str = int(part[1:-1]) if part.startswith("[") else part
        if after is None:
            node[index] = value  # type: ignore[index]
            break
        child = {} if not after.startswith("[") else [0]
        if isinstance(node, dict):
            if not isinstance(node.get(index), (dict, list)):
                node[index] = child
            node = node[index]
        else:
            if not isinstance(node[index], (dict, list)):
                node[index] = child
            node = node[index]
    return doc


@pytest.mark.parametrize("key", numeric_keys())
def test_a_boolean_is_never_a_number(key):
    """`true` at any numeric key of a space is refused at that key, before any other check
    (pydantic alone would read it as 1: one training step, a tolerance of 100%)."""
    base = copy.deepcopy(TINY_SPACE)
    if key.startswith("variants"):
        base["variants"] = [{"name": "a"}]
    if key.startswith("search.n_layers."):
        base["search"] = {"n_layers": {"min": 1, "max": 4, "num": 4}}
    with pytest.raises(UserError) as error:
        parse_space(put(base, key, True), file="s.yaml")
    assert error.value.key == key, str(error.value)
    assert "boolean" in error.value.problem and error.value.file == "s.yaml"


def test_booleans_stay_where_they_mean_a_flag():
    """A flag field (compile, tie_embeddings, a range's log) still takes true."""
    doc = put(put(TINY_SPACE, "train.compile", False), "fixed.tie_embeddings", True)
    doc["search"] = {"n_layers": {"min": 1, "max": 4, "num": 4, "log": True}}
    assert parse_space(doc).train.compile is False


def test_steps_true_is_one_line_exit_2(tmp_path, capsys):
    """Issue 57's case through the CLI: one line naming file, key and problem, exit 2."""
    path = write_space(tmp_path, train={**TINY_SPACE["train"], "tokens": None, "steps": True})
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and "train.steps" in err, err
    assert "boolean" in err


def test_candidate_file_refuses_a_boolean_step(tmp_path):
    """`shapesweep train CONFIG` reads the same recipe: a boolean is not a step count there either."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional", "model": {
        "d_model": 32, "n_layers": 2, "n_heads": 2, "d_h": 64, "vocab_size": 256},
        "train": {"steps": True}}))
    with pytest.raises(UserError) as error:
        load_candidate(path)
    assert error.value.key == "train.steps" and "boolean" in error.value.problem


def test_misspelt_top_level_key_gets_did_you_mean(tmp_path, capsys):
    """`budjet:` is an unknown key with its suggestion, not `budget: Field required`."""
    doc = {k: v for k, v in TINY_SPACE.items() if k != "budget"} | {"budjet": TINY_SPACE["budget"]}
    with pytest.raises(UserError) as error:
        parse_space(doc)
    assert error.value.key == "budjet"
    assert "unknown key 'budjet'" in error.value.problem
    assert "did you mean 'budget'" in error.value.problem
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'budget'" in err, err


@pytest.mark.parametrize("typo,meant", [("serch", "search"), ("fixd", "fixed"), ("seds", "seeds")])
def test_other_top_level_typos_get_did_you_mean(typo, meant):
    doc = {k: v for k, v in TINY_SPACE.items() if k != meant} | {typo: TINY_SPACE.get(meant, [0, 1])}
    with pytest.raises(UserError) as error:
        parse_space(doc)
    assert f"did you mean {meant!r}" in error.value.problem, str(error.value)


def test_adaptive_seeds_parse_into_a_typed_range():
    space = parse_space(TINY_SPACE | {"seeds": {"min": 2, "max": 8}})
    assert space.seeds == AdaptiveSeeds(min=2, max=8)
    assert space.trials_per_candidate() == 8  # the trial limits count the range's max
    listed = parse_space(TINY_SPACE | {"seeds": [0, 1, 2]})
    assert listed.seeds == [0, 1, 2] and listed.fixed_seeds() == [0, 1, 2]
    assert listed.trials_per_candidate() == 3
    assert space.space_hash != listed.space_hash
    assert len(plan(space).candidates) == len(plan(listed).candidates)  # the solver ignores seeds


@pytest.mark.parametrize("seeds,key,words", [
    ({"min": 1, "max": 8}, "seeds.min", "2 or more"),
    ({"min": 4, "max": 3}, "seeds", "less than min"),
    ({"min": 2.5, "max": 8}, "seeds.min", "whole number"),
    ({"min": 2, "max": "8"}, "seeds.max", "whole number"),
    ({"min": 2, "max": True}, "seeds.max", "boolean"),
    ({"min": 2}, "seeds.max", "required"),
    ({"min": 2, "mx": 8}, "seeds.mx", "did you mean 'max'"),
    ({"min": 2, "max": 5000}, "seeds", "more than"),
])
def test_bad_adaptive_seeds_are_one_line(seeds, key, words):
    with pytest.raises(UserError) as error:
        parse_space(TINY_SPACE | {"seeds": seeds}, file="s.yaml")
    assert error.value.key == key and words in error.value.problem, str(error.value)


def test_adaptive_seeds_without_a_baseline_are_refused_and_plan_prices_them(tmp_path, capsys):
    """A range where a list is needed is one line; `run` refuses a range with no baseline to
    compare with (one line, exit 2, nothing written); `plan` prices it at its max."""
    space = parse_space(TINY_SPACE | {"seeds": {"min": 2, "max": 4}}, file="s.yaml")
    with pytest.raises(UserError, match="adaptive seeds are parsed but not yet run by the driver"):
        space.fixed_seeds()
    path = write_space(tmp_path, seeds={"min": 2, "max": 4})
    root = tmp_path / "root"
    assert main(["run", str(path), "--root", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "seeds: adaptive seeds compare each candidate with one baseline" in err
    assert not (root / "tiny-depths").exists()
    assert main(["plan", str(path)]) == 0
    assert "adaptive seeds 2-4: no one baseline" in capsys.readouterr().out


def test_measure_seeds_from_the_command_line():
    assert parse_measure_seeds("3") == [0, 1, 2]
    assert parse_measure_seeds("0,4") == [0, 4]
    assert parse_measure_seeds("min=2,max=8") == AdaptiveSeeds(min=2, max=8)
    assert parse_measure_seeds(" max = 6 , min=3") == AdaptiveSeeds(min=3, max=6)
    for text, words in (("min=1,max=8", "2 or more"), ("min=2", "both"), ("min=x,max=3", "whole"),
                        ("min=4,max=3", "less than"), ("min=2,max=3,min=2", "min=A,max=B"),
                        ("a", "cannot read"), ("0,0", "twice")):
        with pytest.raises(UserError) as error:
            parse_measure_seeds(text)
        assert error.value.key == "--seeds" and words in error.value.problem, (text, str(error.value))
