"""`shapesweep status [NAME]`: the sweeps under a root, or one sweep's candidates, verdicts and
trials (a table, or `--format json|csv` for programs).

The verb's arguments and their checks live here; what it shows is gathered by
`status_document`, rendered by `status_view` and printed by `status_report`, imported when the
verb runs (pandas, rich and scipy stay out of `shapesweep --help`).
"""

from __future__ import annotations

import argparse

from shapesweep.common import UserError
from shapesweep.sweep.options import add_adjust
from shapesweep.sweep.store_args import add_root

STATUS_FORMATS = ("table", "json", "csv")


def add_arguments_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, help="one sweep (default: all)")
    add_root(parser)
    parser.add_argument("--top", type=int, default=20,
                        help="trials to list for one sweep, best first (default 20; the table says how "
                        "many it leaves out)")
    parser.add_argument("--all", action="store_true", help="list every trial of one sweep (no --top cut)")
    # Checked in `status`, not by argparse: a bad value is then one line (argparse adds usage).
    parser.add_argument("--format", default="table",
                        help="table, json or csv: one sweep's candidates with mean, std and "
                        "the difference to the baseline with its 95%% interval; without NAME, "
                        "the sweeps with their trial counts")
    parser.add_argument("--baseline", default=None,
                        help="the variant the others are compared with (default: baseline, "
                        "when the sweep has it)")
    parser.add_argument("--per", default=None, metavar="tuned",
                        help="tuned: one sweep's candidates at every tuned value (a space's `tune:`), each "
                        "with the paired difference to the baseline at the same value and at the "
                        "baseline's chosen value")
    parser.add_argument("--metric", default="val_loss",
                        help="final metric to compare (val_loss; train_loss_tail, xformer's "
                        "reported loss; psnr or ssim for vision)")
    add_adjust(parser)


STATUS_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "train_loss_tail", "psnr", "ssim")


PER_VIEWS = ("tuned",)


def check_status_args(args: argparse.Namespace) -> None:
    if args.format not in STATUS_FORMATS:
        raise UserError(f"{args.format!r} is not one of {', '.join(STATUS_FORMATS)}", key="--format")
    if args.metric not in STATUS_METRICS:
        raise UserError(f"{args.metric!r} is not one of {', '.join(STATUS_METRICS)}", key="--metric")
    if args.name is None and args.baseline is not None:
        raise UserError("needs one sweep NAME", key="--baseline")
    if args.per not in (None, *PER_VIEWS):
        raise UserError(f"{args.per!r} is not one of {', '.join(PER_VIEWS)}", key="--per")
    if args.per is not None and args.name is None:
        raise UserError("needs one sweep NAME", key="--per")
    if args.top < 1:
        raise UserError(f"must be at least 1 (--all lists every trial), not {args.top}", key="--top")
    if args.adjust is not None:
        from shapesweep.results.multiplicity import check_method  # scipy: not for --help

        check_method(args.adjust)
        if args.name is None:
            raise UserError("needs one sweep NAME", key="--adjust")


def status(args: argparse.Namespace) -> int:
    check_status_args(args)
    from shapesweep.sweep.status_report import show  # pandas, rich: not for --help

    return show(args)
