"""The memory model (`shapesweep.trainers.memory`) against measured peaks, on CPU.

For one small model of each kind of block the model counts (conventional SwiGLU, ReLU, GELU
and GQA; hourglass; a ><former bottleneck; a mixture of experts) at micro-batches 2 and 8
(of a step of 8 sequences of 64 tokens) and 4 with z-loss: a real two-step run of
`shapesweep.trainers.loop.train` (eager, fp32, one torch thread), its peak of live tensor
bytes from torch's profiler (`memory.measured_peak`, `profile_memory=True`), the predicted
peak by term, and the error. Also the prediction for issue 37's three GPU peaks (arithmetic
only), or with `--gpu`, on a CUDA device, each of them trained 2 steps of 2 micro-batches
(compiled, bf16) with CUDA's allocator peak beside the prediction (`fitting.compare`). One
JSON line per row.

`--compiled`: the terms torch.compile and bf16 autocast change, on CPU.

    .venv/bin/python benchmarks/bench_memory.py [CASE ...] [--gpu | --compiled]
"""

from __future__ import annotations

import argparse
import json

import torch

from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import memory
from shapesweep.trainers.loop import train

LM = dict(vocab_size=256, n_heads=4)
CASES = {
    "conventional swiglu": dict(family="conventional", d_model=64, n_layers=2, d_h=256, **LM),
    "conventional relu": dict(family="conventional", d_model=64, n_layers=2, d_h=256,
                              activation="relu", **LM),
    "conventional gelu": dict(family="conventional", d_model=64, n_layers=2, d_h=256,
                              activation="gelu", **LM),
    "conventional gqa": dict(family="conventional", d_model=64, n_layers=2, d_h=256, n_kv_heads=2,
                             **LM),
    "hourglass k 4": dict(family="hourglass", d_model=64, n_layers=2, d_h=32, k=4, **LM),
    "><former bottleneck": dict(family="variable_width", d_model=64, n_layers=4, d_h=256,
                                shape="bottleneck", beta=0.5, alpha=0.5, **LM),
    "mixture of experts": dict(family="conventional", d_model=64, n_layers=2, d_h=64, n_experts=4,
                               n_active_experts=2, **LM),
}
GPU_FIXED = dict(d_model=768, n_layers=12, n_heads=12, vocab_size=100352, tie_embeddings=False,
                 activation="swiglu")
GPU_113M = dict(tokens=10**9, seq_len=2048, batch_tokens=524288, micro_batch_size=8, z_loss=1e-5,
                compile=True)


def cpu_rows(names: list[str]):
    for name in names:
        config = make_config(CASES[name])
        for micro, z_loss in ((2, 0.0), (8, 0.0), (4, 1e-4)):
            recipe = TrainConfig(steps=2, seq_len=64, batch_tokens=64 * 8, micro_batch_size=micro,
                                 eval_tokens=128, eval_every=2, z_loss=z_loss)
            measured, _ = memory.measured_peak(lambda: train(config, recipe))  # noqa: B023
            predicted = memory.estimate(config, recipe, "cpu")
            yield {"case": name, "micro_batch": micro, "z_loss": z_loss, "measured": measured,
                   **predicted.to_dict(), "error": round(predicted.total / measured - 1, 3)}


def compiled_rows(names: list[str]):
    """Micro-batch 4, torch.compile (Inductor's C++ kernels) and eager, fp32 and bf16 autocast:
    each compiled run measured after a first one compiled it."""
    for name in names:
        config = make_config(CASES[name])
        for autocast in ("none", "bfloat16"):
            for compiled in (True, False):
                recipe = TrainConfig(steps=2, seq_len=64, batch_tokens=64 * 8, micro_batch_size=4,
                                     eval_tokens=128, eval_every=2, compile=compiled,
                                     autocast=autocast)
                if compiled:
                    train(config, recipe)
                measured, _ = memory.measured_peak(lambda: train(config, recipe))  # noqa: B023
                predicted = memory.estimate(config, recipe, "cpu")
                yield {"case": name, "compiled": compiled, "autocast": autocast,
                       "measured": measured, **predicted.to_dict(),
                       "error": round(predicted.total / measured - 1, 3)}


def measured_gpu_rows():
    """Issue 37's three shapes trained on this CUDA device: 2 steps, each 2 of the figure's
    micro-batches (accumulation, so the gradients and AdamW's states are all held)."""
    from shapesweep.trainers.fitting import compare

    for name, gib, config, recipe in _gpu_cases():
        seqs = recipe.micro_batch_size
        short = TrainConfig.model_validate(recipe.model_dump() | {
            "tokens": None, "tokens_per_param": None, "steps": 2, "eval_every": 2,
            "batch_tokens": 2 * seqs * recipe.seq_len, "eval_tokens": recipe.seq_len,
            "warmup_tokens": None, "warmup_frac": 0.0})
        row = compare(config, short, "cuda")
        yield {"case": name, "issue_gib": gib, "loss_in_graph": memory.LOSS_IN_GRAPH,
               **{k: (round(v / 2**30, 2) if isinstance(v, int) and k != "micro_batch" else v)
                  for k, v in row.items()}}


def _gpu_cases():
    from shapesweep.search_spaces.solver import plan
    from shapesweep.search_spaces.space import load_space

    space = load_space("vformer-shapes-500m")
    first = plan(space).candidates[0]
    return [("conventional 768x12 d_h 3072, 8x2048", 43.9,
             make_config(dict(family="conventional", d_h=3072, **GPU_FIXED)), TrainConfig(**GPU_113M)),
            ("hourglass 768x12 k 8 d_h 384, 8x2048", 49.9,
             make_config(dict(family="hourglass", d_h=384, k=8, **GPU_FIXED)), TrainConfig(**GPU_113M)),
            ("vformer-shapes-500m candidate 0, 4x4096", 44.9, first.config,
             space.train_for(candidate=first).model_copy(update={"compile": True}))]


def gpu_rows():
    """Issue 37's H200 peaks (GiB), bf16 compiled, the loss outside the compiled region, and
    what the model predicts for them on that path and on issue 36's."""
    for name, gib, config, recipe in _gpu_cases():
        e = memory.estimate(config, recipe, "cuda")
        p = memory.Precision.of(recipe, "cuda")
        tokens = e.micro_batch * recipe.seq_len
        row = {"case": name, "measured_gib": gib}
        for path, in_graph in (("outside", False), ("in_graph", True)):
            logits = int(memory.logit_bytes(config.vocab_size, p, recipe.z_loss > 0, in_graph) * tokens)
            total = e.step - e.logits + logits
            row[f"{path}_gib"] = round(total / 2**30, 1)
        row["error_outside"] = round(row["outside_gib"] / gib - 1, 3)
        row |= {k: round(v / 2**30, 2) for k, v in e.to_dict().items()
                if k in ("states", "weight_copies", "activations")}
        yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)} (default all)")
    parser.add_argument("--gpu", action="store_true",
                        help="measure issue 37's three shapes on this CUDA device instead")
    parser.add_argument("--compiled", action="store_true",
                        help="compiled and eager, fp32 and bf16 autocast, at micro-batch 4")
    args = parser.parse_args()
    if args.gpu:
        for row in measured_gpu_rows():
            print(json.dumps(row), flush=True)
        return
    torch.set_num_threads(1)
    if args.compiled:
        for row in compiled_rows(args.cases or ["conventional swiglu", "hourglass k 4"]):
            print(json.dumps(row), flush=True)
        return
    for row in [*cpu_rows(args.cases or list(CASES)), *gpu_rows()]:
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
