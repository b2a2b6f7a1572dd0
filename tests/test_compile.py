"""The GPU path on CPU: torch.compile, bf16 autocast and fused AdamW (issue 27).

Every family's training step compiles as one graph, is not compiled again after its first
call, and trains to the eager losses; a warm worker that trains more shapes than dynamo's
recompile limit keeps compiling every one; bf16 autocast keeps the loss, norms and softmax
in fp32 and tracks the fp32 run; fused AdamW steps as the default one does.

Dynamo's own behaviour (graph breaks, guards, recompiles) does not depend on the backend, so
most tests trace with `aot_eager` (dynamo and AOTAutograd's joint graph, run by eager aten
ops) through torch's backend override; the two `slow` tests run Inductor, as a GPU would.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import loop
from shapesweep.trainers.loop import _backward, adamw, lr_multiplier, make_task, train
from shapesweep.trainers.models import build_model
from shapesweep.trainers.mup import configure
from shapesweep.trainers.objective import lm_loss

LM = dict(d_model=16, n_layers=2, n_heads=2, vocab_size=256)
VFORMER = dict(LM, family="variable_width", n_layers=3, d_h=64, shape="grow", alpha=0.5)
FAMILIES = {  # one tiny model per family and per code path torch.compile has to trace
    "conventional": dict(LM, family="conventional", d_h=64),
    "conventional-post-gqa": dict(LM, family="conventional", d_h=48, n_kv_heads=1,
                                  norm_order="post", activation="gelu", bias=True),
    "simple-gated": dict(LM, family="conventional", d_h=32, activation="simple_gated"),
    "hourglass": dict(LM, family="hourglass", d_h=8, k=2),
    "vformer-carry": dict(VFORMER, resize="carry"),
    "vformer-zero": dict(VFORMER, resize="zero"),
    "vformer-projection": dict(VFORMER, resize="projection"),
    "moe": dict(LM, family="conventional", d_h=16, n_experts=4, n_active_experts=2),
    "vformer-moe": dict(VFORMER, d_h=16, n_experts=3, n_active_experts=1),
    "vision": dict(family="vision_mlp", d_x=64, d_z=32, d_h=16, n_layers=2),
}
# 4 steps of 8 sequences in micro-batches of 4 (the graph serves every micro-batch), z-loss on
LM_RECIPE = dict(steps=4, seq_len=32, batch_tokens=256, micro_batch_size=4, eval_tokens=512,
                 lr=1e-2, eval_every=2, z_loss=1e-3)
VISION_RECIPE = dict(steps=4, batch_size=32, micro_batch_size=16, eval_tokens=128, lr=1e-2,
                     eval_every=2)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs on one torch thread (see conftest)."""


@pytest.fixture
def dynamo_restored():
    """Dynamo's process-wide settings as the test found them (a compiled trial sets some)."""
    config = torch._dynamo.config
    saved = {name: getattr(config, name) for name in (
        "fail_on_recompile_limit_hit", "debug_backend_override",
        "recompile_limit")}
    yield config
    for name, value in saved.items():
        setattr(config, name, value)
    torch._dynamo.reset()


@pytest.fixture
def traced(dynamo_restored):
    """Compiled trials trace with dynamo and AOTAutograd and run eager aten ops."""
    dynamo_restored.debug_backend_override = ">=0:aot_eager"


def _recipe(family: str, **changes) -> TrainConfig:
    base = VISION_RECIPE if family == "vision" else LM_RECIPE
    return TrainConfig(**{**base, **changes})


def _losses(result) -> list[float]:
    return [m[key] for m in result.curve for key in ("train_loss", "val_loss")]


def _distinct_blocks(config) -> int:
    """Blocks of distinct shapes: one graph each under regional compilation."""
    return len({repr(shape) for shape in config.layer_shapes()})


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_compiles_whole_and_trains_as_eager(traced, name):
    """No graph break, no graph compiled after the first call (the other micro-batches and
    steps reuse it), and the eager losses after 4 steps to 1e-5 (the same aten ops, fused
    into one traced graph)."""
    config = make_config(FAMILIES[name])
    eager = train(config, _recipe(name))
    compiled = train(config, _recipe(name, compile=True))
    assert (compiled.compiled, compiled.graph_breaks, compiled.recompiles) == (True, 0, 0)
    assert (eager.compiled, eager.graph_breaks, eager.recompiles) == (False, None, None)
    assert compiled.autocast_dtype == eager.autocast_dtype == "none"
    assert _losses(compiled) == pytest.approx(_losses(eager), abs=1e-5, rel=0)
    assert eager.curve[-1]["train_loss"] < eager.curve[0]["train_loss"]  # it trained


@pytest.mark.parametrize("name", ["conventional", "hourglass", "vformer-carry"])
def test_each_distinct_block_compiles_once_and_a_new_width_anew(traced, name):
    """One graph per distinct block shape and one for the readout with its loss: blocks of a
    shape share a graph (their compile is paid once), and a ><former layer of a new width
    gets its own (dynamo's guards on the parameters' shapes)."""
    from torch._dynamo.utils import counters

    config = make_config(FAMILIES[name])
    distinct = _distinct_blocks(config)
    before = counters["stats"]["unique_graphs"]
    result = train(config, _recipe(name, compile=True))
    assert (result.compiled, result.recompiles) == (True, 0)
    assert counters["stats"]["unique_graphs"] - before == distinct + 1
    assert (distinct == 1) == (name != "vformer-carry")


@pytest.mark.parametrize("name", ["conventional", "hourglass", "vformer-projection"])
def test_regions_of_several_blocks_train_as_eager_with_a_graph_per_distinct_region(traced, name):
    """`compile_blocks_per_region: 2` on 5 layers: regions of 1, 2 and 2 alike blocks, so two
    graphs (lengths 1 and 2) and the readout's; a ><former's layers all differ, so one block a
    region as before. The eager losses to 1e-5, and the model's parameters and state dict are
    its blocks' as before (the regions live outside its module tree)."""
    from torch._dynamo.utils import counters

    from shapesweep.trainers.compile_policy import layer_signatures, region_graphs, runs
    from shapesweep.trainers.compiled import compile_by_block

    config = make_config({**FAMILIES[name], "n_layers": 5})
    shapes = layer_signatures(config)
    graphs = len(region_graphs(config, 2))
    assert graphs == (2 if name != "vformer-projection" else len(set(shapes)))
    eager = train(config, _recipe(name))
    before = counters["stats"]["unique_graphs"]
    compiled = train(config, _recipe(name, compile=True, compile_blocks_per_region=2))
    assert (compiled.compiled, compiled.graph_breaks, compiled.recompiles) == (True, 0, 0)
    longest = max(len(r) for r in runs(shapes, 2))  # a ><former's: 1, whatever was asked
    assert (compiled.blocks_per_region, eager.blocks_per_region) == (longest, None)
    assert longest == (2 if name != "vformer-projection" else 1)
    assert counters["stats"]["unique_graphs"] - before == graphs + 1
    assert _losses(compiled) == pytest.approx(_losses(eager), abs=1e-5, rel=0)
    model = build_model(config)
    keys, parameters = list(model.state_dict()), [id(p) for p in model.parameters()]
    compile_by_block(model, 2, dynamic=False)
    assert list(model.state_dict()) == keys and [id(p) for p in model.parameters()] == parameters
    assert [first for first, _ in model.stages] == [r.start for r in runs(shapes, 2)]


def test_compile_by_block_compiles_every_block_past_dynamos_default_limit(traced, dynamo_restored):
    """A ><former of more distinct layer widths than dynamo's default recompile limit (8),
    compiled by `compile_by_block` alone, as the benchmarks do: every distinct block gets its
    graph. Before the limit was raised there, not only in the loop, the blocks past the
    eighth ran eagerly, in silence."""
    from torch._dynamo.utils import counters

    from shapesweep.trainers.compiled import compile_by_block

    dynamo_restored.recompile_limit = 8  # a fresh process's, as the benchmarks start from
    dynamo_restored.fail_on_recompile_limit_hit = False
    config = make_config(dict(VFORMER, d_model=32, n_layers=12))  # 9 distinct layer widths
    distinct = _distinct_blocks(config)
    assert distinct > 8
    model = build_model(config)
    compile_by_block(model, dynamic=False)
    before = counters["stats"]["unique_graphs"]
    x = torch.randint(0, config.vocab_size, (2, 16))
    objective, _ = model(x, x, 1e-4)
    objective.backward()
    assert counters["stats"]["unique_graphs"] - before == distinct + 1


def test_a_ragged_micro_batch_recompiles_once_in_the_first_step(traced):
    """5 sequences in micro-batches of 2: the last (1 sequence) is a second graph of each
    region (the block both layers share, and the readout with its loss), compiled in the
    first step; the 3 steps after it compile nothing."""
    config, ragged = make_config(FAMILIES["conventional"]), dict(batch_tokens=160,
                                                                 micro_batch_size=2)
    for steps in (1, 4):
        result = train(config, _recipe("conventional", compile=True, steps=steps,
                                       eval_every=steps, **ragged))
        assert (result.compiled, result.graph_breaks, result.recompiles) == (True, 0, 2)


def test_a_warm_worker_compiles_every_shape(dynamo_restored):
    """One process trains more shapes than dynamo's recompile limit (each a new graph of
    the same LM.forward): every trial still runs compiled, none recompiles."""
    dynamo_restored.debug_backend_override = ">=0:eager"  # dynamo alone: its cache is the point
    limit = torch._dynamo.config.recompile_limit
    recipe = TrainConfig(steps=2, seq_len=16, batch_tokens=64, eval_tokens=64, lr=1e-2,
                         eval_every=2, compile=True)
    reports = []
    for d_h in range(4, 4 * (limit + 2), 4):
        shape = dict(family="conventional", d_model=8, n_layers=1, n_heads=2, d_h=d_h)
        result = train(make_config(shape), recipe)
        reports.append((result.compiled, result.graph_breaks, result.recompiles))
    assert len(reports) > limit and reports == [(True, 0, 0)] * len(reports)


def test_train_json_reports_compile_and_autocast(traced, tmp_path, capsys):
    import json

    import yaml

    from shapesweep.sweep.cli.main import main

    path = tmp_path / "candidate.yaml"
    path.write_text(yaml.safe_dump({"family": "conventional", "model": FAMILIES["conventional"],
                                    "train": {**LM_RECIPE, "compile": True,
                                              "autocast": "bfloat16"}}))
    assert main(["train", str(path), "--json", "--steps", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {key: summary[key] for key in ("compiled", "graph_breaks", "recompiles",
                                          "autocast_dtype")} == {
        "compiled": True, "graph_breaks": 0, "recompiles": 0, "autocast_dtype": "bfloat16"}
    assert summary["compile_s"] > 0  # dynamo traced and AOTAutograd compiled, timed
    assert summary["blocks_per_region"] == 1  # auto: one block a region off a GPU


def test_cuda_graph_mode_is_accepted_and_trains_as_default(traced, monkeypatch):
    """`compile_mode: reduce-overhead` (CUDA graphs on a GPU) compiles every region without a
    graph break or a recompile, the condition for capturing them, and on CPU trains as the
    default mode does. Each micro-batch starts a new step of the graph trees (4 steps of 2
    micro-batches: 8 marks); the default mode marks none."""
    marks = []
    mark = torch.compiler.cudagraph_mark_step_begin
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin",
                        lambda: marks.append(1) or mark())
    config = make_config(FAMILIES["conventional"])
    default = train(config, _recipe("conventional", compile=True))
    assert not marks
    graphs = train(config, _recipe("conventional", compile=True, compile_mode="reduce-overhead"))
    assert len(marks) == 8
    assert (graphs.compiled, graphs.graph_breaks, graphs.recompiles) == (True, 0, 0)
    assert _losses(graphs) == pytest.approx(_losses(default), abs=1e-6, rel=0)


# --- bf16 autocast -----------------------------------------------------------------------

def _bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 numbers at |x| (8 significant bits)."""
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - 7)


def test_bf16_autocast_keeps_loss_norms_and_softmax_in_fp32(monkeypatch):
    """Under bf16 autocast: the loss and z-loss are computed in fp32 from the bf16 logits
    (equal to float64 to 1e-5; in bf16 they would be ~1e-2 off), every RMSNorm's output is
    its input normalised in fp32 to within one bf16 ulp of the result, the residual stream
    stays fp32, the router's softmax is fp32, and attention matches fp32 attention of the
    same bf16 q, k, v to a few ulps (its softmax accumulated in fp32)."""
    config = make_config({**FAMILIES["moe"], "norm_order": "post", "n_layers": 2})
    model, recipe = build_model(config), _recipe("moe")
    task, n_seq, _, _ = make_task(config, recipe, None, None)
    x, y = task.train_batch(0, n_seq)

    norms, attention = [], []

    def norm_hook(module, args, out):
        norms.append((module, args[0].detach(), out.detach()))

    for module in model.modules():
        if isinstance(module, torch.nn.RMSNorm):
            module.register_forward_hook(norm_hook)
    sdpa = F.scaled_dot_product_attention

    def recorded(q, k, v, **kwargs):
        out = sdpa(q, k, v, **kwargs)
        attention.append(((q, k, v), kwargs, out.detach()))
        return out

    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    assert logits.dtype == torch.bfloat16
    objective, reported = lm_loss(logits, y, 1e-2)
    wide = logits.double().flatten(0, 1)
    ce = F.cross_entropy(wide, y.flatten())
    z = torch.logsumexp(wide, -1).pow(2).mean()
    assert objective.dtype == reported.dtype == torch.float32
    assert reported.item() == pytest.approx(ce.item(), abs=1e-5)
    assert objective.item() == pytest.approx((ce + 1e-2 * z).item(), abs=1e-5)

    assert len(norms) == 2 * 2 + 1 and any(inp.dtype == torch.bfloat16 for _, inp, _ in norms)
    for module, inp, out in norms:
        exact = F.rms_norm(inp.float(), module.normalized_shape, module.weight.float(), module.eps)
        assert (out.float() - exact).abs().le(_bf16_ulp(exact)).all()
    pre_norm_inputs = [inp for module, inp, _ in norms if module is model.final_norm]
    assert pre_norm_inputs[0].dtype == torch.float32  # the residual stream
    for block in model.blocks:
        assert block.ffn.aux_loss.dtype == torch.float32  # from the fp32 router softmax

    assert len(attention) == 2
    for (q, k, v), kwargs, out in attention:
        assert q.dtype == torch.bfloat16
        exact = sdpa(q.float(), k.float(), v.float(), **kwargs)
        assert (out.float() - exact).abs().max() <= 4 * _bf16_ulp(exact.abs().max())


@pytest.mark.parametrize("name", ["conventional", "moe"])
def test_bf16_autocast_trains_as_fp32(name):
    """8 steps with bf16 autocast against fp32 on the same batches: every train and val loss
    within 0.02 nats (measured: < 0.005), and not bit-identical (autocast did run)."""
    config = make_config(FAMILIES[name])
    fp32 = train(config, _recipe(name, steps=8, eval_every=4, autocast="none"))
    bf16 = train(config, _recipe(name, steps=8, eval_every=4, autocast="bfloat16"))
    assert (fp32.autocast_dtype, bf16.autocast_dtype) == ("none", "bfloat16")
    assert _losses(bf16) == pytest.approx(_losses(fp32), abs=0.02, rel=0)
    assert _losses(bf16) != _losses(fp32)


# --- fused AdamW -------------------------------------------------------------------------

def test_fused_adamw_steps_as_the_default_one():
    """The loop's AdamW (muP groups, per-group lr, schedule, clipping) fused and foreach on
    the same gradients: every parameter within 1e-6 after 6 steps."""
    config, recipe = make_config(FAMILIES["hourglass"]), _recipe("hourglass", steps=6,
                                                                  weight_decay=0.1)
    task, n_seq, _, _ = make_task(config, recipe, None, None)
    runs = []
    for fused in (False, True):
        torch.manual_seed(recipe.seed)
        model = build_model(config)
        groups = configure(model, config, recipe)
        optimizer = adamw(groups, recipe, fused=fused)
        assert optimizer.defaults["fused"] is (True if fused else None)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_multiplier(s, recipe.steps, recipe))
        for step in range(recipe.steps):
            x, y = task.train_batch(step, n_seq)
            _backward(model, x, y, recipe.micro_batch_size, torch.device("cpu"),
                      contextlib.nullcontext, recipe.z_loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
        runs.append(dict(model.named_parameters()))
    initial = dict(build_model(config).named_parameters())
    for name, unfused in runs[0].items():
        assert torch.allclose(runs[1][name], unfused, rtol=1e-6, atol=1e-6), name
    assert any(not torch.equal(p, initial[name]) for name, p in runs[0].items())


def test_the_loop_fuses_adamw_on_cuda_only(monkeypatch):
    """What the loop asks for: fused on CUDA, torch's default elsewhere (CPU arithmetic
    stays that of a plain loop, `test_hotpath`)."""
    asked = []
    real = loop.adamw
    monkeypatch.setattr(loop, "adamw", lambda groups, train, fused: asked.append(fused)
                        or real(groups, train, fused))
    train(make_config(FAMILIES["conventional"]), _recipe("conventional", steps=1, eval_every=1))
    assert asked == [False]


# --- Inductor, as on a GPU ---------------------------------------------------------------

@pytest.mark.slow
def test_inductor_trains_a_moe_as_eager(dynamo_restored):
    """Inductor's kernels (C++ on CPU) on its riskiest input, a mixture of experts' symbolic
    per-expert token counts: the eager losses after 4 steps to 1e-4 relative."""
    config, recipe = make_config({**FAMILIES["moe"], "n_layers": 1}), _recipe("moe")
    eager = train(config, recipe)
    compiled = train(config, recipe.model_copy(update={"compile": True}))
    assert (compiled.compiled, compiled.graph_breaks, compiled.recompiles) == (True, 0, 0)
    assert _losses(compiled) == pytest.approx(_losses(eager), rel=1e-4)


@pytest.mark.slow
def test_inductor_with_bf16_autocast_tracks_eager_bf16(dynamo_restored):
    """The GPU recipe's combination on CPU: Inductor under bf16 autocast with z-loss, against
    eager bf16: every loss within 0.02 nats (bf16 rounding differs between fused kernels
    and eager ops)."""
    config = make_config(FAMILIES["conventional-post-gqa"])
    recipe = _recipe("conventional", autocast="bfloat16")
    eager = train(config, recipe)
    compiled = train(config, recipe.model_copy(update={"compile": True}))
    assert (compiled.compiled, compiled.graph_breaks, compiled.recompiles) == (True, 0, 0)
    assert compiled.autocast_dtype == "bfloat16"
    assert _losses(compiled) == pytest.approx(_losses(eager), abs=0.02, rel=0)
    assert all(math.isfinite(v) for v in _losses(compiled))


# --- through a sweep ---------------------------------------------------------------------

def _compiled_space(tmp_path, depths: range) -> str:
    """Tiny LMs at one parameter budget: `depths` x 2 head counts, each its own shape."""
    from sweep_helpers import write_space

    return str(write_space(tmp_path, {
        "name": "compiled-shapes", "family": "conventional",
        "budget": {"non_embedding_params": 41216, "tolerance": 0.05},
        "fixed": {"d_model": 32, "vocab_size": 256, "activation": "swiglu"},
        "search": {"n_layers": list(depths), "n_heads": [2, 4]}, "solve": "d_h",
        "train": {"tokens": 1024, "seq_len": 32, "batch_tokens": 512, "lr": 3.0e-3,
                  "eval_tokens": 512, "compile": True}}))


@pytest.mark.slow
@pytest.mark.own_ray  # its trials read TORCH_COMPILE_OVERRIDE_BACKENDS: a Ray started after it is set
def test_a_sweep_on_one_warm_worker_compiles_every_trial(tmp_path, monkeypatch):
    """More shapes than the recompile limit, one trial at a time on one warm Ray worker
    (dynamo alone, set in the workers' environment): every trial's row in the store says
    it ran compiled, whole, and compiled once."""
    from sweep_helpers import run

    from shapesweep.results.store import load_trials

    monkeypatch.setenv("TORCH_COMPILE_OVERRIDE_BACKENDS", ">=0:eager")
    root = tmp_path / "sweeps"
    assert run("run", _compiled_space(tmp_path, range(1, 6)), "--root", str(root),
               "--scheduler", "fifo", "--max-concurrent", "1") == 0
    trials = load_trials(str(root))
    assert len(trials) > torch._dynamo.config.recompile_limit
    assert set(trials.status) == {"completed"}
    assert trials[["compiled", "graph_breaks", "recompiles", "autocast_dtype", "blocks_per_region"]
                  ].drop_duplicates().values.tolist() == [[True, 0, 0, "none", 1]]
    assert (trials["compile_s"] > 0).all()


@pytest.mark.parametrize("command", ["run", "train"])
def test_fsdp_with_compile_is_refused_before_any_work(tmp_path, capsys, command):
    """FSDP2's hooks stay out of torch.compile's graph: one line, exit 2, nothing written."""
    import yaml
    from sweep_helpers import run

    root = tmp_path / "sweeps"
    if command == "run":
        code = run("run", _compiled_space(tmp_path, range(1, 3)), "--root", str(root),
                   "--workers-per-trial", "2", "--parallel", "fsdp")
    else:
        path = tmp_path / "candidate.yaml"
        path.write_text(yaml.safe_dump({"family": "conventional", "model": FAMILIES["conventional"],
                                        "train": {**LM_RECIPE, "compile": True}}))
        code = run("train", str(path), "--workers", "2", "--parallel", "fsdp")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--parallel: fsdp cannot run a recipe with compile: true" in line
    assert not root.exists()
