"""Per-variant training recipes, tokens_per_param, power decay and warmup in tokens, and the
full-size built-in spaces set to the papers' recipes (read from `plan --format json`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from sweep_helpers import TINY_SPACE, TINY_TRAIN, run, write_space

from shapesweep.search_spaces.cadence import eval_steps, total_steps
from shapesweep.search_spaces.candidate_file import load_candidate
from shapesweep.search_spaces.configs import ConventionalConfig, TrainConfig
from shapesweep.search_spaces.solver import plan
from shapesweep.search_spaces.space import list_builtin, load_space
from shapesweep.sweep.search.trials import grid_specs
from shapesweep.trainers.loop import lr_multiplier, warmup_steps
from shapesweep.trainers.memory import MARGIN, estimate, fitting_micro_batch

FULL_SPACES = [n for n, _ in list_builtin() if not n.endswith("-small") and not n.startswith("demo-")]
GPU_BYTES = 80 * 2**30  # one 80 GB GPU

# Two conventional depths, each its own variant with its own recipe.
TWO_RECIPES = {**TINY_SPACE, "name": "two-recipes", "search": {}, "variants": [
    {"name": "shallow", "fixed": {"n_layers": 1}},
    {"name": "deep", "fixed": {"n_layers": 2},
     "train": {"tokens": 16384, "seq_len": 64, "warmup_tokens": 1024, "decay": "power"}},
]}


def _plan_json(capsys, name: str) -> list[dict]:
    assert run("plan", str(name), "--format", "json") == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys, path, key: str, problem: str) -> None:
    """`plan` refuses the space in one line naming file and key, exit 2."""
    assert run("plan", str(path)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{path}: {key}: " in err and problem in err, err


# ------------------------------------------------------------------ per-variant train


def test_variant_train_merges_key_by_key_over_the_space(tmp_path):
    space = load_space(write_space(tmp_path, TWO_RECIPES))
    shallow, deep = (v.train for v in space.resolved())
    assert shallow == TrainConfig(**TINY_TRAIN)
    assert (deep.tokens, deep.seq_len, deep.decay, deep.warmup_tokens) == (16384, 64, "power", 1024)
    assert (deep.batch_tokens, deep.lr, deep.eval_tokens) == (512, 3.0e-3, 2048)  # the space's
    assert deep.warmup_frac is None  # warmup_tokens replaced the space's warmup


def test_each_trial_and_plan_row_carries_its_variants_recipe(tmp_path, capsys):
    path = write_space(tmp_path, TWO_RECIPES)
    space = load_space(path)
    candidates = plan(space).candidates
    specs, _ = grid_specs(space, candidates, [0, 3], None, set())
    expected = {"shallow": 8192, "deep": 16384}
    for spec in specs:  # the trial's document is config_json and what the trainable trains
        variant = next(c.variant for c in candidates if c.key == spec["key"])
        assert spec["document"]["train"]["tokens"] == expected[variant]
        assert spec["document"]["train"]["seed"] == spec["seed"]
    rows = _plan_json(capsys, path)
    assert {r["variant"]: r["train"]["tokens"] for r in rows} == expected
    assert run("plan", str(path), "--out", str(tmp_path / "out")) == 0
    for row in rows:  # the candidate files train as planned
        _, recipe = load_candidate(tmp_path / "out" / f"{row['key']}.yaml")
        assert recipe.tokens == expected[row["variant"]]


@pytest.mark.parametrize("train,key,problem", [
    ({"bogus": 1}, "variants[1].train.bogus", "unknown key 'bogus'"),
    ({"lr": -1}, "variants[1].train.lr", "greater than 0"),
    ({"seq_len": 1024}, "variants[1].train", "less than one sequence"),  # with the space's batch
    ({"tokens": 1000, "tokens_per_param": 5}, "variants[1].train", "not both"),
    ({"warmup_frac": 0.1, "warmup_tokens": 100}, "variants[1].train", "not both"),
])
def test_bad_variant_train_is_one_line_naming_its_key(tmp_path, capsys, train, key, problem):
    doc = {**TWO_RECIPES, "variants": [TWO_RECIPES["variants"][0],
                                       {**TWO_RECIPES["variants"][1], "train": train}]}
    _refused(capsys, write_space(tmp_path, doc), key, problem)


# ------------------------------------------------------------------ tokens_per_param


def test_tokens_per_param_is_that_many_times_the_candidates_total_parameters(tmp_path):
    doc = {**TINY_SPACE, "name": "per-param", "budget": {"total_params": 147776, "tolerance": 0.01},
           "fixed": {"d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 256}, "search": {},
           "train": {**TINY_TRAIN, "tokens": None, "tokens_per_param": 20}}
    space = load_space(write_space(tmp_path, {k: v for k, v in doc.items()}))
    (candidate,) = plan(space).candidates
    # by hand: 2 layers x (attention 4*64*64 + SwiGLU 3*64*256 + two norms 2*64) + final norm
    # 64 + the tied embedding 256*64 = 147,776 parameters, embeddings included
    assert candidate.config == ConventionalConfig(d_model=64, n_layers=2, n_heads=4, d_h=256)
    assert 2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 64 + 256 * 64 == 147776
    train = space.train_for(candidate=candidate)
    assert (train.tokens, train.tokens_per_param) == (20 * 147776, None)


def test_tokens_with_tokens_per_param_is_refused(tmp_path, capsys):
    path = write_space(tmp_path, train={**TINY_TRAIN, "tokens_per_param": 50})
    _refused(capsys, path, "train", "give tokens or tokens_per_param, not both")
    path = write_space(tmp_path, tune={"tokens_per_param": [10, 20]})
    _refused(capsys, path, "tune.tokens_per_param", "cannot be tuned")


def test_a_candidate_file_with_tokens_per_param_trains_its_own_count(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional", "model": {
        "d_model": 64, "n_layers": 2, "n_heads": 4, "d_h": 256}, "train": {"tokens_per_param": 2}}))
    _, recipe = load_candidate(path)
    assert recipe.tokens == 2 * 147776


# ------------------------------------------------------------------ lr_base_d_model


def test_lr_base_d_model_gives_each_width_lr_times_base_over_d_model(tmp_path):
    # Two widths under one tune grid: each candidate trains each tuned lr x 48 / its d_model;
    # the trial's tuned value (what `status` reports as chosen) stays the grid's.
    doc = {**TINY_SPACE, "name": "two-widths", "search": {}, "variants": [
        {"name": "narrow", "fixed": {"d_model": 32, "n_layers": 2}},
        {"name": "wide", "fixed": {"d_model": 64, "n_layers": 1}}],
        "budget": {"non_embedding_params": 30912, "tolerance": 0.1},
        "train": {**TINY_TRAIN, "lr_base_d_model": 48}, "tune": {"lr": [1e-3, 4e-3]}}
    space = load_space(write_space(tmp_path, doc))
    widths = {c.variant: c for c in plan(space).candidates}
    for tuned in space.tuned_settings():
        for name, factor in (("narrow", 1.5), ("wide", 0.75)):
            train = space.train_for(tuned, seed=0, candidate=widths[name])
            assert train.lr == pytest.approx(tuned["lr"] * factor, rel=1e-12)
            assert train.lr_base_d_model is None  # resolved: a candidate file trains this lr
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional", "model": {
        "d_model": 128, "n_layers": 2, "n_heads": 4, "d_h": 256},
        "train": {"lr": 3e-3, "lr_base_d_model": 768}}))
    assert load_candidate(path)[1].lr == pytest.approx(3e-3 * 6, rel=1e-12)
    at_base = TrainConfig(lr=3e-3, lr_base_d_model=64)
    assert at_base.for_model(widths["wide"].config, 1).lr == 3e-3  # exactly: x 1 at the base


def test_lr_base_d_model_is_refused_under_mup_and_without_a_d_model(tmp_path, capsys):
    path = write_space(tmp_path, train={**TINY_TRAIN, "lr_base_d_model": 64, "init": "mup"})
    _refused(capsys, path, "train", "muP does")
    vision = yaml.safe_load(Path("search_spaces/builtin/vision-pareto-digits.yaml").read_text())
    vision["train"]["lr_base_d_model"] = 64
    _refused(capsys, write_space(tmp_path, vision), "train.lr_base_d_model", "does not have")


def test_asha_needs_one_budget_fifo_does_not(tmp_path, capsys):
    path = write_space(tmp_path, TWO_RECIPES)
    root = tmp_path / "root"
    assert run("run", str(path), "--root", str(root), "--scheduler", "asha") == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--scheduler: ASHA" in err and "--scheduler fifo" in err, err
    assert not root.exists()  # refused before anything was written


# ------------------------------------------------------------------ schedules


def test_power_decay_follows_its_documented_formula():
    train = TrainConfig(steps=1000, warmup_frac=0.08, decay="power", decay_power=0.5,
                        min_lr_frac=0.1)
    w = 80  # round(0.08 * 1000)
    for step in (0, 39, 78):  # linear warmup: t / W, t = step + 1
        assert lr_multiplier(step, 1000, train) == pytest.approx((step + 1) / w)
    for step in (79, 80, 319, 999):  # then (W / t)^p
        assert lr_multiplier(step, 1000, train) == pytest.approx((w / (step + 1)) ** 0.5)
    assert lr_multiplier(319, 1000, train) == pytest.approx(0.5)
    steep = train.model_copy(update={"decay_power": 2.0})
    assert lr_multiplier(799, 1000, steep) == pytest.approx(0.1)  # (80/800)^2 = 0.01, floored


def test_warmup_tokens_converts_to_whole_optimizer_steps():
    train = TrainConfig(tokens="2.5B", seq_len=2048, batch_tokens=524288, warmup_tokens="50M")
    assert warmup_steps(train, 4769) == 95  # 50M / 524,288 tokens per step = 95.4
    assert lr_multiplier(0, 4769, train) == pytest.approx(1 / 95)
    assert lr_multiplier(94, 4769, train) == pytest.approx(1.0)
    assert warmup_steps(train, 4769, units_per_step=1_000_000) == 50  # the loop's actual step
    ragged = TrainConfig(steps=10, seq_len=100, batch_tokens=250, warmup_tokens=1000)
    assert warmup_steps(ragged, 10) == 5  # a step trains 2 whole sequences = 200 tokens
    assert TrainConfig.model_validate(train.model_dump()) == train  # round trip (warmup_frac None)
    with pytest.raises(ValueError, match="not both"):
        TrainConfig(warmup_frac=0.1, warmup_tokens=100)


# ------------------------------------------------------------------ the papers' recipes


def test_hourglass_scale_ladder_trains_hourglass_ffn_recipe_per_size(capsys):
    rows = _plan_json(capsys, "hourglass-scale-ladder")
    assert len(rows) == 8
    expected = {  # hourglass-ffn Tables 3 and 7: tokens, batch tokens, warmup tokens, seq len
        "113m": (2.5e9, 0.5 * 2**20, 50e6, 2048), "403m": (7e9, 0.5 * 2**20, 50e6, 2048),
        "906m": (16e9, 2 * 2**20, 50e6, 2048), "1074m": (21e9, 4 * 2**20, 200e6, 4096)}
    for row in rows:
        train = row["train"]
        size = row["variant"].split("-")[0]
        got = (train["tokens"], train["batch_tokens"], train["warmup_tokens"], train["seq_len"])
        assert got == expected[size], row["variant"]
        assert train["decay"] == "cosine" and train["z_loss"] > 0 and train["init"] == "normal"
        assert "warmup_frac" not in train and row["vocab_size"] > 100_000
    (hourglass,) = [r for r in rows if r["variant"] == "1074m-hourglass"]
    assert (hourglass["k"], hourglass["d_model"], hourglass["n_layers"]) == (1, 2848, 20)


def test_hourglass_ffn_113m_spaces_train_the_113m_recipe():
    for name in FULL_SPACES:
        if name.startswith("hourglass") and name != "hourglass-scale-ladder":
            for v in load_space(name).resolved():
                t = v.train
                assert (t.tokens, t.batch_tokens, t.seq_len, t.warmup_tokens) == (
                    2.5e9, 524288, 2048, 50e6), name
                assert t.decay == "cosine" and t.z_loss > 0, name


NOMINAL = {"200m": 200e6, "500m": 500e6, "1b": 1e9, "2b": 2e9}  # xformer Table 1's sizes


def _vformer_size(name: str, row: dict) -> str:
    """The Table 1 size a vformer candidate trains at: its variant, else the space's one size."""
    if row["variant"] in NOMINAL:
        return row["variant"]
    return "2b" if name == "vformer-moe" else "500m"


@pytest.mark.parametrize("name", [n for n in FULL_SPACES if n.startswith("vformer")])
def test_vformer_spaces_train_50_tokens_per_nominal_parameter_with_power_decay(capsys, name):
    """The xformer paper trains 50 x the *nominal* size (10/25/50/100B; the MoE 100B), whatever the
    candidate's exact count."""
    batches = {"200m": 512, "500m": 1024, "1b": 2048, "2b": 4096}  # xformer Table 1, sequences
    for row in _plan_json(capsys, name):
        train, size = row["train"], _vformer_size(name, row)
        assert train["tokens"] == 50 * NOMINAL[size]
        assert (train["decay"], train["warmup_frac"], train["seq_len"]) == ("power", 0.08, 4096)
        assert train["init"] == "mup" and row["bias"] is False and row["vocab_size"] == 100277
        assert train["batch_tokens"] == batches[size] * 4096


# xformer Table 2: the constant-width transformers' pre-training PFLOP/s-days.
TABLE2_PF_DAYS = {"200m": 0.18, "500m": 1.11, "1b": 4.52, "2b": 16.92}
PF_DAY = 1e15 * 86400  # FLOPs in one PFLOP/s-day


def test_vformer_baselines_fit_xformer_table2_compute(capsys):
    """The paper does not state the FFN width. SwiGLU with d_h = 4 D and untied embeddings
    gives 233M/546M/1.10B/1.96B parameters, and 6N + attention + readout FLOPs x Table 1's
    tokens gives Table 2's compute within 5% (0.176/1.11/4.52/16.1 PF-days; 8/3 D gave 3.8 at
    1B). The ><formers save compute, as Table 2's do."""
    rows = _plan_json(capsys, "vformer-vs-constant")
    totals = {"200m": 233.2e6, "500m": 546.5e6, "1b": 1.096e9, "2b": 1.959e9}
    compute = {}
    for row in rows:
        size = row["variant"]
        compute[size, row["shape"]] = row["flops_per_token"] * row["train"]["tokens"] / PF_DAY
        if row["shape"] == "constant":
            assert row["d_h"] == 4 * row["d_model"] and row["tie_embeddings"] is False
            assert row["params_total"] == pytest.approx(totals[size], rel=1e-3)
            assert compute[size, "constant"] == pytest.approx(TABLE2_PF_DAYS[size], rel=0.05)
    for size in NOMINAL:
        assert 0.95 < compute[size, "bottleneck"] / compute[size, "constant"] < 0.99


def test_ffn_variants_trains_simple_gated_recipe(capsys):
    for row in _plan_json(capsys, "ffn-variants-124m"):
        train = row["train"]
        assert (train["steps"], train["batch_tokens"], train["seq_len"]) == (50000, 512 * 2048, 2048)
        assert (train["lr"], train["decay"], train["init"]) == (3.0e-4, "cosine", "xavier")
    assert load_space("ffn-variants-124m").seeds == [42]


def test_vision_pareto_trains_hourglass_mlp_recipe():
    space = load_space("vision-pareto-digits")
    assert space.tune == {"lr": [1.0e-4, 5.0e-4, 1.0e-3, 5.0e-3]} and len(space.seeds) == 5
    assert space.choice_seeds == [100]  # chosen apart from the seeds that measure
    for v in space.resolved():
        t = v.train
        epochs = {"denoise": 30, "superres": 50}[v.fixed["task"]]  # of MNIST's 50K split
        assert (t.tokens, t.batch_size, t.decay, t.warmup_frac) == (epochs * 50_000, 128, "linear", 0)


SHARDED = {"vformer-moe"}  # ~3B parameters: fp32 weights, grads and AdamW alone are ~46 GB


@pytest.mark.parametrize("name", [n for n in FULL_SPACES if n not in SHARDED])
def test_every_full_size_candidate_fits_one_80gb_gpu(name):
    """The memory model (shapesweep.trainers.memory) on CUDA: every candidate fits an 80 GB
    GPU at some micro-batch (`auto` finds it), within the planning margin."""
    space = load_space(name)
    for candidate in plan(space).candidates:
        train = space.train_for(candidate=candidate)
        micro = fitting_micro_batch(candidate.config, train, "cuda", GPU_BYTES)
        need = estimate(candidate.config, train, "cuda", micro).total
        assert need <= MARGIN * GPU_BYTES, (candidate.variant, micro, need / 2**30)
        if name != "vision-pareto-digits":  # whole micro batches in each optimizer step
            sequences = train.batch_tokens // train.seq_len
            assert train.micro_batch_size and sequences % train.micro_batch_size == 0
            assert math.log2(train.micro_batch_size).is_integer()


@pytest.mark.slow
def test_a_fifo_sweep_trains_each_candidate_to_its_own_budget(local_ray, tmp_path):
    """Real Ray: each trial trains its variant's tokens, is `completed` at its own budget,
    and its row records that budget and the resolved recipe."""
    from shapesweep.results.store import load_trials

    path = write_space(tmp_path, TWO_RECIPES)
    root = tmp_path / "sweeps"
    assert run("run", str(path), "--root", str(root), "--scheduler", "fifo",
               "--max-concurrent", "2") == 0
    trials = load_trials(str(root), ["two-recipes"])
    assert sorted(trials["variant"]) == ["deep", "shallow"]
    for row in trials.itertuples():
        budget = {"shallow": 8192, "deep": 16384}[row.variant]
        assert row.status == "completed", row.error
        assert row.tokens == row.train_tokens_budget == budget
        train = json.loads(row.config_json)["train"]
        assert train["tokens"] == budget and row.seq_len == train["seq_len"]


def test_the_moe_pair_needs_more_than_one_gpu_and_says_so():
    """The 3B-total MoE pair does not train eagerly on one 80 GB GPU without sharding (FSDP):
    the memory check refuses it there; compiled (the loss in the graph) a micro-batch of one
    would leave under a third of the card, with ~46 GB of it AdamW's states. Its space says
    how it should run."""
    space = load_space("vformer-moe")
    for candidate in plan(space).candidates:
        train = space.train_for(candidate=candidate)
        eager = estimate(candidate.config, train.model_copy(update={"compile": False}), "cuda", 1)
        compiled = estimate(candidate.config, train.model_copy(update={"compile": True}), "cuda", 1)
        assert eager.total > MARGIN * GPU_BYTES
        assert compiled.total > 0.7 * GPU_BYTES
    assert "sharded" in space.description


CPU_SPACES = [n for n, _ in list_builtin() if n.endswith("-small") or n.startswith("demo-")]


@pytest.mark.parametrize("name", CPU_SPACES)
def test_cpu_spaces_whose_widths_differ_carry_the_lr_by_mup_or_tune_it(name):
    """One learning rate for shapes of different widths favours the widths it suits: a
    built-in CPU comparison transfers it with muP or tunes it per candidate."""
    space = load_space(name)
    candidates = plan(space).candidates
    widths = {c.config.d_model for c in candidates if hasattr(c.config, "d_model")}
    if len(widths) > 1:
        recipes = [space.train_for(candidate=c) for c in candidates]
        assert "lr" in space.tune or all(r.init == "mup" for r in recipes), name


NOT_ISO_BUDGET = "not iso-budget"  # how a space's description declares that its sizes differ on purpose


def _within_budget_or_declared(space) -> None:
    """Every candidate within 1% of the budget (its baseline's count), unless the space says in
    its description that it is not iso-budget (an ablation over sizes, a Pareto sweep)."""
    candidates = plan(space).candidates
    assert candidates
    if NOT_ISO_BUDGET in space.description:
        return
    missed = {c.variant: f"{c.budget_error:+.2%}" for c in candidates if abs(c.budget_error) > 0.01}
    assert not missed, missed
    assert all(v.budget.tolerance <= 0.01 for v in space.resolved())


@pytest.mark.parametrize("name", FULL_SPACES)
def test_every_full_size_comparison_is_within_one_percent_of_its_budget_or_says_why_not(name):
    _within_budget_or_declared(load_space(name))


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "docs" / "spaces").glob("*.yaml")),
                         ids=lambda path: path.stem)
def test_the_docs_one_off_spaces_plan_within_their_budgets(path):
    _within_budget_or_declared(load_space(str(path)))


EVAL_SEQUENCES = 8192  # held-out sequences per evaluation, at least, in a full-size LM space
EVAL_SHARE = 0.10  # evaluated tokens per trained token, at most (`run` flags more)


@pytest.mark.parametrize("name", [n for n in FULL_SPACES if not n.startswith("vision")])
def test_full_size_evaluations_resolve_the_papers_effects_at_a_tenth_of_the_tokens(name):
    """Each evaluation reads at least 8,192 held-out sequences, so its standard error is at
    most a 90th of the per-sequence spread (0.0044 nats at 0.4; `val_loss_se` measures it and
    `status` flags a verdict within its reach), for at most a tenth of a trial's tokens."""
    space = load_space(name)
    for candidate in plan(space).candidates:
        train = space.train_for(candidate=candidate)
        steps = total_steps(train, train.batch_tokens)
        evaluations = len(eval_steps(train, steps, train.batch_tokens))
        assert train.eval_tokens // train.seq_len >= EVAL_SEQUENCES, candidate.variant
        assert evaluations * train.eval_tokens <= EVAL_SHARE * steps * train.batch_tokens, candidate.variant
