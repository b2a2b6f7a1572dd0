"""`shapesweep status [NAME]`: the sweeps under a root, or one sweep's candidates, verdicts and
trials (a table, or `--format json|csv` for programs).

The verb's arguments and their checks live here; what it shows is gathered by
`status_document`, rendered by `status_view` and printed by `status_report` (the verb table
imports this module only when the verb runs: pandas, rich and scipy stay out of `--help`).
"""

from __future__ import annotations

from shapesweep.common import UserError
from shapesweep.results.multiplicity import check_method
from shapesweep.sweep.cli.verb_table import StatusArgs
from shapesweep.sweep.verbs.status_report import show

STATUS_FORMATS = ("table", "json", "csv")




STATUS_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "train_loss_tail", "psnr", "ssim")


PER_VIEWS = ("tuned",)


def check_status_args(args: StatusArgs) -> None:
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
        check_method(args.adjust)
        if args.name is None:
            raise UserError("needs one sweep NAME", key="--adjust")


def status(args: StatusArgs) -> int:
    check_status_args(args)
    return show(args)
