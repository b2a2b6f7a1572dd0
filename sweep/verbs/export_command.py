"""`shapesweep export NAME`: the best candidates as files `train` accepts, and, with
`--weights`, as transformers / litgpt / torch folders.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import sys
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel

from shapesweep.common import UserError, check_output, make_folder, pid_alive
from shapesweep.common import plain as _clean
from shapesweep.families.base import of
from shapesweep.results.roles import with_seed_roles
from shapesweep.results.schema import TRIAL_COLUMNS
from shapesweep.results.stats import (
    HIGHER_IS_BETTER,
    ROLE_COLUMN,
    canonical_tuned_column,
    tuned_stats,
)
from shapesweep.results.store import list_sweeps, load_trials, read_sweep_json, unknown_sweep
from shapesweep.search_spaces.configs import TrainConfig, config_key, make_config, train_document
from shapesweep.search_spaces.safe_yaml import parse_yaml
from shapesweep.search_spaces.solver import METRIC_COLUMN
from shapesweep.search_spaces.space import parse_space
from shapesweep.sweep.cli.verb_table import (  # SWEEP_WEIGHTS: a bare `export --weights`
    SWEEP_WEIGHTS,
    ExportArgs,
)
from shapesweep.sweep.driver.ray_session import ray_storage
from shapesweep.sweep.verbs.store_access import read_catalog
from shapesweep.trainers.data import is_pretokenized

FOLDER_FORMATS = {"hf": "shapesweep.trainers.hf_export", "litgpt": "shapesweep.trainers.litgpt_export",
                  "torch": "shapesweep.trainers.torch_export"}


EXPORT_METRICS = ("val_loss", "best_val_loss", "val_ppl", "train_loss", "psnr", "ssim", "tokens",
                  "steps", "wall_time_s", "tokens_per_s")


def _budget_groups(trials, record) -> Any:
    """Each trial's budget target: the budget column over (1 + budget_error), 3 digits."""
    where = f"catalog sweep {record.name}"
    space = parse_space(parse_yaml(record.space_yaml, where), text=record.space_yaml, file=where)
    column = METRIC_COLUMN[space.budget.target_metric]
    target = trials[column] / (1 + trials["budget_error"].fillna(0))
    return target.map(lambda t: float(f"{t:.3g}"))


def export(args: ExportArgs) -> int:
    if args.top < 1:
        raise UserError("must be at least 1", key="--top")
    if args.weights and args.format not in FOLDER_FORMATS:
        raise UserError("only with --format hf or torch", key="--weights")
    if args.tokenizer is not None and args.format != "hf":
        raise UserError("only with --format hf", key="--tokenizer")
    if args.metric not in TRIAL_COLUMNS.names:
        raise UserError(f"unknown column {args.metric!r}", key="--metric")
    out = Path(args.out)
    check_output(out, "--out", folder=True)
    previous = _previous_export(out, args.force)
    trials = load_trials(args.root, [args.name])
    if trials.empty:
        if args.name not in list_sweeps(args.root):
            raise unknown_sweep(args.name, args.root)
        raise UserError(f"sweep {args.name!r} under {args.root} has no trials yet", key="name")
    keep = {"completed", "stopped_early"} if args.include_stopped else {"completed"}
    trials = _seed_means(with_seed_roles(trials, args.root), args.metric, args.include_stopped)
    if args.per == "family":
        chosen = trials.groupby("family", sort=True).head(args.top)
    elif args.per == "budget":
        catalog = read_catalog(args)
        record = catalog.get(args.name) if catalog else None
        if record is None:
            raise UserError(f"sweep {args.name!r} is not in the catalog", key="--per")
        chosen = trials.assign(_budget=_budget_groups(trials, record)).groupby(
            "_budget", sort=True).head(args.top)
    else:
        chosen = trials.head(args.top)
    if chosen.empty:
        raise UserError(f"sweep {args.name!r} has no {'/'.join(sorted(keep))} trials with "
                        f"{args.metric}", key="--metric")

    documents = []
    for rank, row in enumerate(chosen.to_dict("records"), start=1):
        document = json.loads(row["config_json"])
        # rows filed before candidate documents left out keys their family never reads
        document["train"] = train_document(document.get("train") or {}, row["family"])
        document["metrics"] = {m: _clean(row.get(m)) for m in EXPORT_METRICS} | {
            f"{args.metric}_std": _clean(row["std"]), "n_seeds": int(row["n"])}
        document["provenance"] = {
            "sweep": args.name, "trial_id": row["trial_id"], "seed": _clean(row["seed"]),
            "trial_ids": row["trial_ids"], "tuned": json.loads(row["tuned"]),
            "key": row["key"], "code_version": row.get("code_version"),
            "data_hash": row.get("data_hash"), "rank": rank, "ranked_by": args.metric,
        }
        documents.append((f"{rank:02d}-{_file_name(row)}", document))
    if args.format in FOLDER_FORMATS:
        exporter = importlib.import_module(FOLDER_FORMATS[args.format])
        folders = _weight_folders(args.root, args.name, documents, args.weights or [])
        tokenizer = _tokenizer_source(args) if args.format == "hf" else None
        return _export_folders(documents, out, folders, exporter, previous, tokenizer)

    make_folder(out, "--out")  # /proc/self/x: refused only here, before any file
    remove_dead_leftovers(out)
    written = []
    for stem, document in documents:
        path = out / f"{stem}.{args.format}"
        text = (yaml.safe_dump(document, sort_keys=False) if args.format == "yaml"
                else json.dumps(document, indent=2))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    _replace_previous(out, written, previous)
    for path in written:
        print(path)
    return 0


EXPORT_MANIFEST = ".shapesweep-export.json"  # what an export wrote into its --out


EXPORTED = re.compile(r"\d{2,}-[A-Za-z0-9._-]+")  # an exported file or folder's name (`_file_name`)


LEFT_OVER = re.compile(r"\..+\.(\d+)\.(tmp|old)")  # what an export killed midway leaves


def _file_name(row: dict) -> str:
    """An exported config's name after its rank: its variant (`01-baseline.yaml`), else its
    family; the rank keeps two of one variant apart. The key stays in its provenance."""
    variant = row.get("variant")
    name = variant if isinstance(variant, str) else ""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or row["family"]


def _previous_export(out: Path, force: bool) -> set[str]:
    """The names an earlier export wrote into `out` (its manifest), which this one replaces.
    Checked before any work: an `out` holding anything else is refused unless `force`, so a
    folder never mixes two exports (`train best/01-*.yaml` then matches one file)."""
    if out.exists() and not out.is_dir():
        raise UserError("is a file, not a folder", file=str(out), key="--out")
    if not out.is_dir():
        return set()
    try:
        listed = json.loads((out / EXPORT_MANIFEST).read_text())["files"]
        previous = {name for name in listed if isinstance(name, str) and EXPORTED.fullmatch(name)}
    except (OSError, ValueError, KeyError, TypeError):
        previous = set()
    others = sorted(p.name for p in out.iterdir()
                    if p.name not in previous | {EXPORT_MANIFEST} and not LEFT_OVER.fullmatch(p.name))
    if others and not force:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise UserError(f"holds files no earlier export wrote ({shown}): give an empty or new "
                        "folder, or --force to write beside them", file=str(out), key="--out")
    return previous


def remove_dead_leftovers(out: Path) -> list[str]:
    """Remove the temporaries (`.NAME.PID.tmp` / `.old`) an export killed midway left in `out`,
    those whose PID is no longer alive (a live one is another export still writing), as the
    trial folders' orphans are (`shapesweep.sweep.driver.trainable.remove_orphans`); return them."""
    import shutil

    removed = []
    for path in sorted(out.iterdir()) if out.is_dir() else []:
        named = LEFT_OVER.fullmatch(path.name)
        if named is None or int(named[1]) == os.getpid() or pid_alive(int(named[1])):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def _replace_previous(out: Path, written: list[Path], previous: AbstractSet[str]) -> None:
    """Once the new files are in place: remove what the earlier export wrote that this one did
    not overwrite, and record what this one wrote."""
    import shutil

    for name in previous - {path.name for path in written}:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    tmp = out / f".{EXPORT_MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"files": sorted(path.name for path in written)}, indent=1))
    os.replace(tmp, out / EXPORT_MANIFEST)


def _seed_means(trials, metric: str, include_stopped: bool = False):
    """One row per candidate with a result (`shapesweep.results.stats.tuned_stats`: its
    chosen tuned value, measure seeds only, none stopped unless `include_stopped` ranks
    stopped trials as if they had ended), best first: the export metrics are means over its
    measure seeds, `std` and `n` those of `metric`."""
    trials = trials[trials["status"] != "failed"]
    finished = trials.assign(status="completed") if include_stopped else trials
    chosen = tuned_stats(finished, metric)
    chosen = chosen[chosen["chosen"]]
    finished = finished[(finished["status"] == "completed") & finished[metric].notna()
                        & ~finished[ROLE_COLUMN]]  # a choice seed's trial is no measurement
    finished = finished.assign(tuned=canonical_tuned_column(finished["tuned_json"]))
    groups = finished.sort_values("seed").groupby(["key", "tuned"])
    numeric = [m for m in EXPORT_METRICS if m in finished.columns]
    chosen = chosen.drop(columns=numeric).join(groups[numeric].mean(), on=["key", "tuned"])
    chosen = chosen.join(groups["trial_id"].agg(list).rename("trial_ids"), on=["key", "tuned"])
    return chosen.sort_values("mean", ascending=metric not in HIGHER_IS_BETTER)


def _typed(document: dict[str, object]) -> tuple[BaseModel, TrainConfig]:
    """(model config, TrainConfig) of an exported document (written by the sweep: valid)."""
    model = document["model"]
    assert isinstance(model, dict), "an exported document's model is a mapping"
    config = make_config({**model, "family": document.get("family") or model.get("family")})
    return config, TrainConfig.model_validate(document.get("train") or {})


def _weight_folders(root: str, name: str, documents: list[tuple[str, dict]],
                    folders: list[str]) -> list[str]:
    """`--weights` folders, a bare `--weights` standing for the last checkpoint of each
    exported config's trial (`run --keep-checkpoints` keeps it)."""
    # Lazy: the checkpoints' Tune callback imports Ray, which an export without them never needs.
    from shapesweep.sweep.driver.checkpoints import latest

    if SWEEP_WEIGHTS not in folders:
        return folders
    kept = []
    for stem, document in documents:
        trial_id = document["provenance"]["trial_id"]
        found = latest(ray_storage(root, name), trial_id)
        if found is None:
            raise UserError(f"sweep {name!r} kept no checkpoint of trial {trial_id} ({stem}): "
                            "run it with --keep-checkpoints, or give a `train --save` folder",
                            key="--weights")
        kept.append(str(found))
    return [folder for folder in folders if folder != SWEEP_WEIGHTS] + kept


def family_exporter(config: BaseModel, fmt: str) -> ModuleType:
    """The module that writes `config`'s family in folder format `fmt`, as the family declares
    it (`FamilySpec.exporters`); a format it does not declare is refused in one line."""
    spec = of(config)
    if fmt not in spec.exporters:
        formats = " or ".join(f"--format {f}" for f in [*spec.exporters, "yaml", "json"])
        raise UserError(f"the {spec.name} family has no --format {fmt} export; use {formats}",
                        key="--format")
    return importlib.import_module(spec.exporters[fmt])


def _weights(configs: dict[str, tuple], folders: list[str],
             writers: dict[str, ModuleType]) -> dict[str, tuple]:
    """Each `--weights` folder's (train recipe, state dict), by the key of its exported config."""
    from shapesweep.trainers import checkpoint  # lazy: torch, which only weights need

    found: dict[str, tuple] = {}
    for folder in folders:
        config, train, state = checkpoint.load_model(folder)
        key = config_key(config)
        if key not in configs:
            raise UserError(f"holds config {key}, which is not among the {len(configs)} exported "
                            "(see --top / --per)", file=folder, key="--weights")
        if key in found:
            raise UserError(f"a second folder for config {key}", file=folder, key="--weights")
        reason = writers[key].unsupported(config, train)
        if reason:
            raise UserError(reason, file=folder, key="--weights")
        found[key] = (train, state)
    return found


def _tokenizer_source(args: ExportArgs) -> tuple[str | None] | None:
    """The tokenizer an hf export carries: (`--tokenizer`,), (None,) for bytes when the sweep
    read bytes (the built-in corpus or text), or None (with a notice) when it trained on
    token files whose tokenizer shapesweep never saw."""
    if args.tokenizer is not None:
        return (args.tokenizer,)
    options = read_sweep_json(args.root, args.name, "sweep.json", dict)  # runner.OPTIONS_FILE
    data = options.get("data") if isinstance(options, dict) else None  # a dict, or None
    if data and is_pretokenized(data):
        print(f"export: sweep {args.name!r} trained on token files ({data}); no tokenizer "
              "written (--tokenizer JSON adds the one they were made with)", file=sys.stderr)
        return None
    return (None,)


def _export_folders(documents: list[tuple[str, dict]], out: Path, weight_folders: list[str],
                    exporter, previous: AbstractSet[str] = frozenset(),
                    tokenizer_source: tuple[str | None] | None = None) -> int:
    """One folder per config (`exporter.write_folder`, and the tokenizer when
    `tokenizer_source` names one: (path,) or (None,) for bytes); every check runs before
    anything is written; what an earlier export wrote there (`previous`) is replaced."""
    exporter.require()
    fmt = next(f for f, module in FOLDER_FORMATS.items() if module == exporter.__name__)
    configs, writers = {}, {}
    for stem, document in documents:
        config, train = _typed(document)
        try:
            writers[config_key(config)] = writer = family_exporter(config, fmt)
        except UserError as error:
            raise UserError(f"{stem}: {error.problem}", key="--format") from None
        reason = writer.unsupported(config, train)
        if reason:
            raise UserError(f"{stem}: {reason}", key="--format")
        configs[config_key(config)] = (stem, document, config, train)
    weights = _weights(configs, weight_folders, writers)
    tokenizer = None
    if tokenizer_source is not None:
        tokenizer = exporter.read_tokenizer(tokenizer_source[0])
        for _, _, config, _ in configs.values():
            vocab = config.model_dump()["vocab_size"]  # every LM family's config has one
            exporter.check_vocab(tokenizer, vocab, tokenizer_source[0])

    make_folder(out, "--out")  # /proc/self/x: refused only here, before any file
    remove_dead_leftovers(out)
    written = []
    for key, (stem, document, config, train) in configs.items():
        path, tmp = out / stem, out / f".{stem}.{os.getpid()}.tmp"
        trained, state = weights.get(key, (train, None))  # weights: the recipe they ran under
        tmp.mkdir()
        try:
            (tmp / "shapesweep.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
            writers[key].write_folder(tmp, config, trained, state)
            if tokenizer is not None:
                exporter.write_tokenizer(tmp, tokenizer)
            if path.exists():  # a previous export of the same config: swap it out whole
                old = out / f".{stem}.{os.getpid()}.old"
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old)
            else:
                os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        written.append(path)
    _replace_previous(out, written, previous)
    for path in written:
        print(path)
    return 0
