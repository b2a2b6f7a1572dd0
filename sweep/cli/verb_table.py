"""The verb table: each verb's arguments (a dataclass whose fields are its flags: an option
several verbs take is named from its group with `same_as`, the rest are the verb's own),
the function that runs it, and its one-line help. `shapesweep.sweep.cli.main` derives each verb's
parser from its arguments and checks every value before the verb runs.

Light on purpose (no Ray, no torch, no numpy): `--help` builds every parser from here, and
a verb's module, with what it imports, is imported only when that verb runs.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass

from shapesweep.sweep.options.fields import option, same_as, whole_count
from shapesweep.sweep.options.option_groups import (
    Parallel,
    PlanPriceOptions,
    ReportOptions,
    ResourceOptions,
    SearchOptions,
    TrainerOptions,
)
from shapesweep.sweep.options.store_args import StoreOptions
from shapesweep.sweep.options.sweep_options import SweepOptions

FOLDER_FORMATS = ("hf", "litgpt", "torch")  # export's folder formats (export_command.FOLDER_FORMATS)
SWEEP_WEIGHTS = ""  # a bare `export --weights`: from the sweep's kept checkpoints
DEMO_SPACE = "demo-quick"  # the built-in demo space (sweep/verbs/demo.py says why)
FULL_DEMO_SPACE = "demo-ucurve"  # the full comparison
MAX_PORT = 65535
MAX_POLL_S = 86400.0  # a day: a browser's timer holds at most 24.8 days


@dataclass(kw_only=True)
class SpacesArgs:
    fast: bool = option(False, "--fast",
                        help="show raw grid sizes instead of solving each space for its candidate count")
    format: str = option("table", "--format", choices=("table", "json"),
                         help="table: one line per space, its description cut to the terminal's "
                              "width; json: every field, in full")
    wide: bool = option(False, "--wide",
                        help="the table with each space's budget and its whole description")


@dataclass(kw_only=True)
class PlanArgs:
    """`plan`'s own flags, the resources and seeds `run` would take, and the price flags."""

    space: str = option(MISSING, "space",
                        help="a built-in space name (see `shapesweep spaces`) or a YAML file")
    format: str = option("table", "--format", choices=("table", "json", "csv"))
    seq_len: int | None = option(None, "--seq-len", at_least=1,
                                 help="sequence length for FLOPs (default: the space's train.seq_len)")
    out: str | None = option(None, "--out", metavar="DIR",
                             help="also write one candidate YAML per candidate into DIR "
                                  "(each trains as is with `shapesweep train DIR/KEY.yaml`)")
    device: str | None = same_as(TrainerOptions, "device")
    gpu_memory: str | None = same_as(ResourceOptions, "gpu_memory")
    gpus_per_trial: float | None = same_as(ResourceOptions, "gpus_per_trial")
    seeds: list[int] | dict[str, int] | None = same_as(SearchOptions, "seeds")
    gpu: str | None = same_as(PlanPriceOptions, "gpu")
    gpus: int | None = same_as(PlanPriceOptions, "gpus")
    gpu_hour_price: float | None = same_as(PlanPriceOptions, "gpu_hour_price")
    min_effect: float | None = same_as(PlanPriceOptions, "min_effect")
    seed_sd: float | None = same_as(PlanPriceOptions, "seed_sd")


@dataclass(kw_only=True)
class TrainArgs:
    # Several files (a glob such as best/01-*.yaml matching two) are refused in one line.
    config: list[str] = option(MISSING, "config", metavar="CONFIG", nargs="+",
                               help="candidate YAML/JSON: {family, model: {...}, train: {...}}")
    steps: int | None = option(None, "--steps", read=whole_count,
                               help="optimizer steps, a positive whole count (overrides "
                                    "train.steps/tokens)")
    tokens: int | None = option(None, "--tokens", read=whole_count,
                                help="token budget, e.g. 2M (images for vision; overrides train.tokens)")
    data: str | None = same_as(TrainerOptions, "data")
    tokenizer: str | None = same_as(TrainerOptions, "tokenizer")
    device: str | None = same_as(TrainerOptions, "device")
    threads: int | None = same_as(TrainerOptions, "threads")
    checkpoint_dir: str | None = option(None, "--checkpoint-dir", metavar="DIR",
                                        help="checkpoint every evaluation; resume from it if it holds one")
    save: str | None = option(None, "--save", metavar="DIR",
                              help="write the trained model.safetensors and its config.yaml into DIR")
    json: bool = option(False, "--json", help="print one JSON object of final metrics")
    workers: int = option(1, "--workers", at_least=1,
                          help="train data parallel on N Ray Train workers, each on its slice of "
                               "every step's batch (same result as 1; default 1: no Ray)")
    parallel: Parallel = same_as(TrainerOptions, "parallel")
    gpus_per_trial: float | None = same_as(ResourceOptions, "gpus_per_trial")
    address: str | None = same_as(ResourceOptions, "address")


@dataclass(kw_only=True)
class ResumeArgs:
    """The sweep's name and the options `resume` takes over the saved ones."""

    name: str = option(MISSING, "name", help="the sweep to finish")
    root: str = same_as(SweepOptions, "root")
    storage: str | None = same_as(SweepOptions, "storage")
    address: str | None = same_as(SweepOptions, "address")
    max_concurrent: int | None = same_as(SweepOptions, "max_concurrent")
    retry_failed: bool = same_as(SweepOptions, "retry_failed")
    progress: bool = same_as(SweepOptions, "progress")
    gpu_memory: str | None = same_as(SweepOptions, "gpu_memory")
    dry_run: bool = same_as(SweepOptions, "dry_run")
    gpu: str | None = same_as(SweepOptions, "gpu")
    gpus: int | None = same_as(SweepOptions, "gpus")
    gpu_hour_price: float | None = same_as(SweepOptions, "gpu_hour_price")


@dataclass(kw_only=True)
class StatusArgs:
    name: str | None = option(None, "name", nargs="?", help="one sweep (default: all)")
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    # status checks --top's floor itself: its refusal names --all
    top: int = option(20, "--top", help="trials to list for one sweep, best first (default 20; "
                                        "the table says how many it leaves out)")
    all: bool = option(False, "--all", help="list every trial of one sweep (no --top cut)")
    # Checked in `status`, not by argparse: a bad value is then one line naming the choices.
    format: str = option("table", "--format",
                         help="table, json or csv: one sweep's candidates with mean, std and "
                              "the difference to the baseline with its 95%% interval; without "
                              "NAME, the sweeps with their trial counts")
    baseline: str | None = option(None, "--baseline",
                                  help="the variant the others are compared with (default: "
                                       "baseline, when the sweep has it)")
    per: str | None = option(None, "--per", metavar="tuned",
                             help="tuned: one sweep's candidates at every tuned value (a space's "
                                  "`tune:`), each with the paired difference to the baseline at "
                                  "the same value and at the baseline's chosen value")
    metric: str = same_as(SearchOptions, "metric")
    adjust: str | None = same_as(ReportOptions, "adjust")


@dataclass(kw_only=True)
class ExportArgs:
    name: str = option(MISSING, "name", help="the sweep")
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    top: int = option(MISSING, "--top", at_least=1, help="how many configs (per group)")
    per: str | None = option(None, "--per", choices=("family", "budget"),
                             help="take the top N of each family or of each budget")
    metric: str = same_as(SearchOptions, "metric")
    format: str = option("yaml", "--format", choices=("yaml", "json", *FOLDER_FORMATS),
                         help="hf: a Hugging Face LlamaForCausalLM folder per config "
                              "(conventional family); torch: a standalone PyTorch model.py "
                              "folder (any LM family); both need shapesweep[hf]")
    weights: list[str] | None = option(
        None, "--weights", nargs="?", const=SWEEP_WEIGHTS, metavar="DIR",
        help="--format hf/torch: the trained weights go with each config; bare: from the "
             "sweep's last checkpoints (run --keep-checkpoints); DIR: a `train --save` folder, "
             "with the config of its shape (repeatable)")
    tokenizer: str | None = same_as(TrainerOptions, "tokenizer")
    out: str = option(MISSING, "--out",
                      help="folder for the config files: empty, new, or holding only what an "
                           "earlier export wrote there (replaced)")
    force: bool = option(False, "--force",
                         help="write into an --out that holds other files too (they stay; an "
                              "earlier export's files are replaced)")
    include_stopped: bool = option(False, "--include-stopped",
                                   help="rank stopped-early trials too (default: completed only)")


@dataclass(kw_only=True)
class DashboardArgs:
    names: list[str] = option(MISSING, "names", nargs="+", metavar="NAME",
                              help="sweep name(s) to report on")
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    out: str = option("report.html", "--out", help="HTML file to write (default report.html)")
    adjust: str | None = same_as(ReportOptions, "adjust")


@dataclass(kw_only=True)
class ServeArgs:
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    host: str = option("127.0.0.1", "--host",
                       help="address to bind (default 127.0.0.1, this machine only)")
    port: int = option(8050, "--port", at_least=0, at_most=MAX_PORT,
                       help="port (default 8050; 0 picks a free one)")
    poll: float = option(3.0, "--poll", above=0, at_most=MAX_POLL_S,
                         help="seconds between the page's checks for new trials (default 3, at "
                              "most a day)")


@dataclass(kw_only=True)
class DemoArgs:
    root: str = same_as(StoreOptions, "root")
    storage: str | None = same_as(StoreOptions, "storage")
    space: str = option(DEMO_SPACE, "--space",
                        help=f"the space to sweep (default the built-in {DEMO_SPACE}; "
                             f"{FULL_DEMO_SPACE} is the full comparison, one shape more and 6x the "
                             "tokens a trial; times measured: docs/development.md)")
    out: str | None = option(None, "--out", help="report path (default ROOT/demo-report.html)")
    max_concurrent: int | None = same_as(ResourceOptions, "max_concurrent", default=2,
                                         help="trials at once (default 2, one per core here)")


STUDY_ACTIONS = ("run", "report", "list", "docs")  # shapesweep.sweep.verbs.study_command


@dataclass(kw_only=True)
class StudyArgs:
    action: str = option(MISSING, "action", choices=STUDY_ACTIONS,
                         help="run: run (or resume) the study's sweeps into studies/NAME/store; "
                              "report: write studies/NAME/report.md from that store (and the docs' includes); "
                              "list: the studies; docs: rewrite the study includes of README.md and "
                              "docs/ from the reports")
    name: str | None = option(None, "name", nargs="?", help="the study (a folder of --studies)")
    studies: str = option("studies", "--studies", metavar="DIR",
                          help="the folder of studies, each NAME/study.yaml (default: studies)")
    max_concurrent: int | None = same_as(ResourceOptions, "max_concurrent")
    progress: bool = same_as(SweepOptions, "progress")


@dataclass(frozen=True)
class Verb:
    """A verb: its module and function (imported only when it runs), its help, its arguments."""

    module: str
    function: str
    help: str
    arguments: type


VERBS: dict[str, Verb] = {
    "spaces": Verb("shapesweep.sweep.verbs.spaces_command", "spaces",
                   "list the built-in search spaces", SpacesArgs),
    "plan": Verb("shapesweep.sweep.verbs.spaces_command", "plan",
                 "solve a space into iso-budget candidates and print them", PlanArgs),
    "train": Verb("shapesweep.sweep.verbs.train_command", "train",
                  "train one candidate config on real data", TrainArgs),
    "run": Verb("shapesweep.sweep.verbs.run_command", "run",
                "run a sweep of a space with Ray Tune", SweepOptions),
    "resume": Verb("shapesweep.sweep.verbs.run_command", "resume",
                   "finish a sweep: run only the candidates missing from its results", ResumeArgs),
    "status": Verb("shapesweep.sweep.verbs.status_command", "status",
                   "list sweeps, or one sweep's trials and best results", StatusArgs),
    "export": Verb("shapesweep.sweep.verbs.export_command", "export",
                   "write the best configurations as files `train` accepts", ExportArgs),
    "dashboard": Verb("shapesweep.dashboards.cli", "dashboard",
                      "write a self-contained HTML report for sweeps", DashboardArgs),
    "serve": Verb("shapesweep.dashboards.cli", "serve",
                  "serve a live dashboard over every sweep in the store", ServeArgs),
    "demo": Verb("shapesweep.sweep.verbs.demo", "demo",
                 "run the small built-in demo sweep and build its dashboard", DemoArgs),
    "study": Verb("shapesweep.sweep.verbs.study_command", "study",
                  "run a pre-registered study (studies/NAME/study.yaml), write its report or the docs' "
                  "includes of it", StudyArgs),
}
