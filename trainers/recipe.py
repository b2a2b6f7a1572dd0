"""The short-trial training recipe (`TrainConfig`): the `train:` block of a space or candidate
document, and the trial's identity (a checkpoint resumes only under the same recipe). It lives
with the trainer that reads it; spaces and candidate files validate their `train:` blocks with
it (re-exported by `shapesweep.search_spaces.configs`). No torch here: planning reads it.

What the trainer does with it: `shapesweep.trainers.schedule` (the lr schedule, AdamW, the
autocast dtype), `shapesweep.trainers.loop` (the step), `shapesweep.trainers.mup` (the init).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from shapesweep.families.base import (
    MAX_DIM,
    MAX_SEED,
    MAX_TOKENS,
    Dim,
    PositiveCount,
    PositiveInt,
    Strict,
    parse_count,
)


class TrainConfig(Strict):
    """The short-trial training recipe (the `train:` block of a space or candidate). Every
    float is finite (`Strict`) and in the range the trainer accepts, so a bad value is one
    line at load, never a failure inside every trial."""

    tokens: PositiveCount | None = None  # LM token budget; or give steps
    steps: Annotated[int, Field(gt=0, le=MAX_TOKENS)] | None = None
    seq_len: Dim = 128
    batch_tokens: PositiveCount = 4096  # tokens per optimizer step (LM)
    # sequences (images) per forward, the rest of a step by gradient accumulation; `auto`: the
    # largest whose predicted peak fits the device (shapesweep.trainers.memory); unset: auto on
    # CUDA, the whole step elsewhere
    micro_batch_size: PositiveInt | Literal["auto"] | None = None
    batch_size: PositiveInt = 128  # images per step (vision)
    lr: Annotated[float, Field(gt=0)] = 3e-3
    # the d_model at which `lr` holds: a model of another d_model trains at lr x this /
    # d_model (standard parametrization's 1/width rule for Adam), so one lr, and one `tune`
    # grid, serves every width of a space. Not under muP, which scales each layer by itself
    lr_base_d_model: Dim | None = None
    warmup_frac: Annotated[float, Field(ge=0, lt=1)] | None = 0.05  # None with warmup_tokens
    decay: Literal["cosine", "linear", "constant", "power", "wsd"] = "cosine"
    min_lr_frac: Annotated[float, Field(ge=0, le=1)] = 0.1
    weight_decay: Annotated[float, Field(ge=0)] = 0.1
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9  # AdamW's moment decays: [0, 1)
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    grad_clip: Annotated[float, Field(ge=0)] = 1.0
    z_loss: Annotated[float, Field(ge=0)] = 0.0
    parametrization: Literal["standard", "mup"] = "standard"
    mup_base_width: PositiveInt = 64
    # muP's base FFN inner width (the down projection's base fan-in); None: 4 x mup_base_width
    mup_base_d_h: PositiveInt | None = None
    # Depth-muP; needs init: mup (shapesweep.trainers.mup). true / tp6 (Tensor Programs VI):
    # residual branches x sqrt(2 mup_base_depth / branches), their matrices' lr likewise;
    # completep (CompleteP, Dey et al. 2025): branches x mup_base_depth / layers, Adam eps too;
    # completep-subblocks: CompleteP counting residual branches (2 mup_base_depth / branches)
    depth_mup: bool | Literal["tp6", "completep", "completep-subblocks"] = False
    mup_base_depth: Annotated[int, Field(gt=0, le=MAX_DIM)] = 4
    eval_every: PositiveInt | None = None  # steps; default ~10 evaluations per trial
    eval_tokens: PositiveCount = 32768  # LM validation tokens per evaluation
    # xformer's reported loss: the training loss over the last this-many steps (every 10th)
    loss_tail_steps: PositiveInt = 1000
    seed: Annotated[int, Field(ge=0, lt=MAX_SEED)] = 0
    # torch.compile of the training step, block by block (shapesweep.trainers.compiled); any
    # device (Inductor's C++ kernels on CPU). auto: on CUDA when the trial's expected training
    # time is several times its compile time, never on CPU (shapesweep.trainers.compile_policy)
    compile: bool | Literal["auto"] = "auto"
    # torch.compile's mode for the compiled regions; reduce-overhead: CUDA graphs, for shapes
    # whose step is launch-bound (small models on a GPU)
    compile_mode: Literal["default", "reduce-overhead"] = "default"
    # consecutive blocks of one shape compiled as one region: 1 compiles each distinct block
    # once (the cheapest compile); more trades compile seconds for a faster step. auto: 1 but
    # on a GPU, where the trial's expected training time pays for longer regions
    # (shapesweep.trainers.compile_policy; docs/benchmarks.md measures both)
    compile_blocks_per_region: PositiveInt | Literal["auto"] = "auto"
    # bf16 autocast of the forward; auto: bfloat16 on CUDA, none elsewhere
    autocast: Literal["auto", "bfloat16", "none"] = "auto"
    noise_std: Annotated[float, Field(gt=0)] = 0.25  # vision denoising
    # How weights start (shapesweep.trainers.mup): normal | scaled | xavier | mup. Unset: mup under
    # `parametrization: mup`, else normal; `init: mup` alone turns muP on.
    init: Literal["normal", "scaled", "xavier", "mup"] | None = None
    # Paper recipes. tokens_per_param (xformer: 50): the budget is this x the candidate's
    # params_total, embeddings included (SearchSpace.train_for resolves it into `tokens`).
    tokens_per_param: Annotated[float, Field(gt=0, le=MAX_TOKENS)] | None = None
    warmup_tokens: Annotated[int, BeforeValidator(parse_count), Field(ge=0, le=MAX_TOKENS)] | None = None
    # ^ hourglass-ffn: warmup in tokens (images for vision), an alternative to warmup_frac
    decay_power: Annotated[float, Field(gt=0)] = 0.5  # `decay: power`'s exponent p

    @model_validator(mode="after")
    def _one_of_each(self):
        """A budget and a warmup are each given one way: tokens or tokens_per_param, and
        warmup_frac or warmup_tokens (which sets warmup_frac to None)."""
        if self.tokens is not None and self.tokens_per_param is not None:
            raise ValueError("give tokens or tokens_per_param, not both")
        if self.warmup_tokens is not None:
            if self.warmup_frac is not None and "warmup_frac" in self.model_fields_set:
                raise ValueError("give warmup_frac or warmup_tokens, not both")
            object.__setattr__(self, "warmup_frac", None)
        elif self.warmup_frac is None:
            raise ValueError("give warmup_frac or warmup_tokens")
        return self

    def for_model(self, config: BaseModel, params: int) -> TrainConfig:
        """This recipe as one model trains it: `tokens_per_param` turned into `tokens` for
        its `params`, and `lr_base_d_model` into the lr at its d_model."""
        if self.tokens_per_param is None and self.lr_base_d_model is None:
            return self
        fields = self.model_dump(exclude_unset=True)
        if self.tokens_per_param is not None:
            fields["tokens"] = round(fields.pop("tokens_per_param") * params)
        if self.lr_base_d_model is not None:
            d_model = getattr(config, "d_model", None)
            if d_model is None:
                raise ValueError(f"lr_base_d_model scales lr by d_model, which a "
                                 f"{getattr(config, 'family', type(config).__name__)} model does not have")
            fields["lr"] = self.lr * (fields.pop("lr_base_d_model") / d_model)  # 1 at the base: exact
        return TrainConfig.model_validate(fields)

    @model_validator(mode="after")
    def _resolve_init(self):
        """muP is one choice with two names: `init: mup` and `parametrization: mup` go together."""
        if self.init is None:
            object.__setattr__(self, "init", "mup" if self.parametrization == "mup" else "normal")
        elif self.init == "mup" and "parametrization" not in self.model_fields_set:
            object.__setattr__(self, "parametrization", "mup")
        elif (self.init == "mup") != (self.parametrization == "mup"):
            raise ValueError(f"init {self.init!r} contradicts parametrization "
                             f"{self.parametrization!r} (muP is init: mup with parametrization: "
                             "mup; give one of them)")
        if self.lr_base_d_model is not None and self.parametrization == "mup":
            raise ValueError("lr_base_d_model scales the whole lr as 1/d_model, which muP does "
                             "layer by layer already: drop one")
        return self

    @model_validator(mode="after")
    def _depth_mup_needs_mup(self):
        """Depth-muP scales muP's rules by depth: without muP there is nothing to scale."""
        if self.depth_mup and self.init != "mup":
            raise ValueError(f"depth_mup needs init: mup (this recipe's init is {self.init!r})")
        return self

    @model_validator(mode="after")
    def _whole_sequences(self):
        """A step trains on whole sequences: below seq_len, batch_tokens would silently
        become one sequence (the loop takes max(1, batch_tokens // seq_len) of them)."""
        if self.batch_tokens < self.seq_len:
            raise ValueError(f"batch_tokens={self.batch_tokens} is less than one sequence "
                             f"(seq_len={self.seq_len})")
        return self

    # xformer §4's representation analysis at the end of an LM trial (shapesweep.trainers.analysis):
    # true | false; unset: on for variable_width models (constant width included), else off.
    analysis: bool | None = None
    # Warmup-stable-decay (`decay: wsd`; Hägele et al. 2024, MiniCPM): after the warmup the lr
    # stays at train.lr, then the last cooldown_frac of the steps cool it to min_lr_frac in
    # cooldown_shape. cooldown_evals: at each scheduler rung (`rungs`, the default under wsd)
    # or at every evaluation (`all`) a trial also branches such a cooldown, cooldown_frac x the
    # steps so far, from a copy of itself and records `val_loss_cooled` (trainers/cooldown.py).
    cooldown_frac: Annotated[float, Field(gt=0, le=0.5)] = 0.2
    cooldown_shape: Literal["linear", "1-sqrt"] = "1-sqrt"
    cooldown_evals: Literal["off", "rungs", "all"] | None = None

    @model_validator(mode="after")
    def _cooldown_needs_wsd(self):
        """A cooldown is the end of a warmup-stable-decay schedule: branched from a cosine (or
        any decaying) schedule it would cool an lr that is already cooling. Unset, the
        cooldown evaluations are `rungs` under wsd and `off` otherwise."""
        given = [name for name in ("cooldown_frac", "cooldown_shape")  # a dumped recipe has the defaults
                 if getattr(self, name) != type(self).model_fields[name].default]
        given += ["cooldown_evals"] if self.cooldown_evals not in (None, "off") else []
        if self.decay != "wsd" and given:
            raise ValueError(f"{', '.join(given)} set with decay {self.decay!r}: "
                             "cooldowns and cooldown evaluations need decay: wsd")
        if self.cooldown_evals is None:
            object.__setattr__(self, "cooldown_evals", "rungs" if self.decay == "wsd" else "off")
        return self
