"""Language-model data: real token streams on disk, and the batches the loop trains on.

Every source ends up as two 1-D integer arrays (train, val) memory-mapped from `.npy`
files, plus the sha256 of the bytes they came from, so a trial row can say exactly
what it was trained on. Batches are a pure function of (seed, step), which makes runs
deterministic and resuming trivial: the data position is just the step.

Sources: the built-in corpus (the running interpreter's standard library source,
byte-level), a text file or folder (bytes), a nanoGPT `.bin` (uint16) or `.npy`
(uint16/uint32) token memmap, Parquet with a `text` column, and any of the text
sources through a local Hugging Face `tokenizer.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import sysconfig
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shapesweep.common import UserError

VAL_FRACTION = 0.05  # of files (folders, the built-in corpus) or of tokens (single streams)
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
BYTE_VOCAB = 256
# Text sources are read (and tokenized) whole in memory, a few copies at once: refuse more
# than this share of the machine's memory before reading a byte (token files are memory-mapped).
TEXT_MEMORY_SHARE = 1 / 8


@dataclass
class TokenData:
    """A train/val split of one token stream."""

    train: np.ndarray
    val: np.ndarray
    vocab_size: int  # how many token ids the data may use (256 for bytes)
    data_hash: str  # sha256 of the source bytes (and tokenizer, if any)
    source: str


def cache_dir() -> Path:
    """Where tokenized corpora are cached: `$SHAPESWEEP_CACHE` or `~/.cache/shapesweep`."""
    path = Path(os.environ.get("SHAPESWEEP_CACHE") or Path.home() / ".cache" / "shapesweep")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _save_npy(path: Path, array: np.ndarray) -> None:
    """Write atomically so a concurrent reader never maps half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


def _cached_split(name: str, make) -> tuple[np.ndarray, np.ndarray, dict]:
    """Memory-map `name`'s cached split, building it with `make() -> (train, val, meta)` once."""
    folder = cache_dir() / name
    meta_path = folder / "meta.json"
    if not meta_path.exists():
        train, val, meta = make()
        folder.mkdir(parents=True, exist_ok=True)
        _save_npy(folder / "train.npy", train)
        _save_npy(folder / "val.npy", val)
        tmp = meta_path.with_name(f".meta.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)
    meta = json.loads(meta_path.read_text())
    return (np.load(folder / "train.npy", mmap_mode="r"),
            np.load(folder / "val.npy", mmap_mode="r"), meta)


def _text_files(root: Path, skip: AbstractSet[str] = frozenset()) -> list[Path]:
    """Sorted files under `root`, pruning directories named in `skip` and hidden ones."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        found += [Path(folder) / f for f in files if not f.startswith(".")]
    return sorted(found)


def _split_files(files: list[Path], read) -> tuple[np.ndarray, np.ndarray, str]:
    """Concatenate files; the last VAL_FRACTION of them (at least one) is validation."""
    n_val = max(1, round(len(files) * VAL_FRACTION)) if len(files) > 1 else 0
    digest = hashlib.sha256()
    parts = []
    for path in files:
        data = path.read_bytes()
        digest.update(data)
        parts.append(data)
    if n_val == 0:
        stream = read(b"".join(parts))
        cut = int(len(stream) * (1 - VAL_FRACTION))
        return stream[:cut], stream[cut:], digest.hexdigest()
    return read(b"".join(parts[:-n_val])), read(b"".join(parts[-n_val:])), digest.hexdigest()


def _bytes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


def builtin_corpus() -> TokenData:
    """The standard library source of the running interpreter, byte-level, cached once."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in _text_files(root, SKIP_DIRS) if p.suffix == ".py"]
    # Cheap fingerprint of the file set; the content hash itself is computed on the build.
    finger = hashlib.sha256(str(root).encode())
    for p in files:
        finger.update(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())
    name = f"stdlib-py{sys.version_info.major}{sys.version_info.minor}-{finger.hexdigest()[:12]}"

    def make():
        train, val, digest = _split_files(files, _bytes)
        return train, val, {"hash": digest, "files": len(files)}

    train, val, meta = _cached_split(name, make)
    return TokenData(train, val, BYTE_VOCAB, meta["hash"], f"python {sys.version.split()[0]} stdlib")


def _tokenizer_reader(tokenizer_path: str | None):
    """bytes -> token array, with the vocabulary size and a hash identifying the tokenizer."""
    if tokenizer_path is None:
        return _bytes, BYTE_VOCAB, ""
    path = Path(tokenizer_path)
    if not path.is_file():
        raise UserError("tokenizer file not found", file=str(path))
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise UserError("reading a tokenizer.json needs the `tokenizers` package "
                        "(pip install tokenizers)", file=str(path)) from error
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # the Rust side raises a bare Exception on bad JSON
        raise UserError(f"not a Hugging Face tokenizer.json ({error})", file=str(path)) from error
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    dtype = np.uint16 if vocab <= 2**16 else np.uint32

    def read(data: bytes) -> np.ndarray:
        ids = tokenizer.encode(data.decode("utf-8", errors="replace")).ids
        return np.asarray(ids, dtype=dtype)

    return read, vocab, hashlib.sha256(path.read_bytes()).hexdigest()


def _token_file(path: Path) -> np.ndarray:
    """A pre-tokenized stream: nanoGPT `.bin` (raw uint16) or a 1-D uint16/uint32 `.npy`."""
    if path.suffix == ".bin":
        if path.stat().st_size % 2:
            raise UserError("a .bin token file must hold uint16 tokens (odd byte size)", file=str(path))
        return np.memmap(path, dtype=np.uint16, mode="r")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as error:
        raise UserError(f"not a readable .npy array ({error})", file=str(path)) from error
    if array.ndim != 1 or array.dtype not in (np.uint8, np.uint16, np.uint32):
        raise UserError(f"expected a 1-D uint16 or uint32 token array, got {array.ndim}-D "
                        f"{array.dtype}", file=str(path))
    return array


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _token_facts(path: Path) -> tuple[str, int]:
    """(sha256, max token id) of a token file, remembered per (path, size, mtime): a sweep
    loads the same multi-GB file once per trial and should scan it only once."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    memo = cache_dir() / "token-files" / f"{key[:24]}.json"
    if memo.exists():
        facts = json.loads(memo.read_text())
        return facts["hash"], facts["max"]
    tokens = _token_file(path)
    if len(tokens) == 0:
        raise UserError("token file is empty", file=str(path))
    facts = {"hash": _file_hash(path), "max": int(tokens.max())}
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(facts))
    os.replace(tmp, memo)
    return facts["hash"], facts["max"]


def _regular_files(files: list[Path]) -> int:
    """Their total size; a device, FIFO or socket (`/dev/zero`) is refused before any read."""
    total = 0
    for path in files:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UserError("not a regular file (a device, FIFO or socket cannot be read as "
                            "training data)", file=str(path))
        total += info.st_size
    return total


def _check_text_size(files: list[Path], source: Path) -> None:
    """Refuse a text source too big to read into memory, before reading it."""
    total = _regular_files(files)
    limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * TEXT_MEMORY_SHARE)
    if total > limit:
        raise UserError(f"{total / 2**30:.1f} GiB of text is more than this machine can tokenize "
                        f"in memory ({limit / 2**30:.1f} GiB); pre-tokenize it into a .bin or "
                        ".npy token file", file=str(source))


def _pretokenized(path: Path) -> TokenData:
    """`X/train.bin` + `X/val.bin` (nanoGPT layout), or one stream split at the end."""
    val_path = path.with_name("val" + path.suffix) if path.stem == "train" else None
    _regular_files([path, *([val_path] if val_path is not None and val_path.exists() else [])])
    train = _token_file(path)
    digest, top = _token_facts(path)
    if val_path is not None and val_path.exists():
        val = _token_file(val_path)
        val_digest, val_top = _token_facts(val_path)
        digest, top = hashlib.sha256((digest + val_digest).encode()).hexdigest(), max(top, val_top)
    else:
        cut = int(len(train) * (1 - VAL_FRACTION))
        train, val = train[:cut], train[cut:]
    if len(train) == 0 or len(val) == 0:
        raise UserError("token file is too short for a train/val split", file=str(path))
    return TokenData(train, val, top + 1, digest, str(path))


def _parquet_text(path: Path) -> bytes:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["text"])
    except Exception as error:  # pyarrow raises ArrowInvalid / KeyError-like errors
        problem = "no `text` column" if "text" in str(error) else f"not readable Parquet ({error})"
        raise UserError(problem, file=str(path), key="text") from error
    texts = table.column("text").to_pylist()
    if any(t is not None and not isinstance(t, str) for t in texts):
        raise UserError("the `text` column must hold strings", file=str(path), key="text")
    return "\n".join(t for t in texts if t).encode("utf-8")


def is_pretokenized(path: str | Path) -> bool:
    """Token ids already (a .bin/.npy file, or a folder holding train.bin), not text."""
    source = Path(path)
    return (source.is_dir() and (source / "train.bin").exists()) or source.suffix in (".bin", ".npy")


def load_lm_data(path: str | None = None, tokenizer: str | None = None) -> TokenData:
    """Any supported source -> a cached, memory-mapped train/val split."""
    if path is None:
        if tokenizer is not None:
            raise UserError("--tokenizer needs --data (the built-in corpus is byte-level)")
        return builtin_corpus()
    source = Path(path)
    if not source.exists():
        raise UserError("data path not found", file=str(source))
    if is_pretokenized(source):
        if tokenizer is not None:
            raise UserError("a pre-tokenized file takes no --tokenizer", file=str(source))
        return _pretokenized(source / "train.bin" if source.is_dir() else source)
    read, vocab, tok_hash = _tokenizer_reader(tokenizer)
    if source.suffix == ".parquet":
        files = [source]

        def split():
            stream = read(_parquet_text(source))
            cut = int(len(stream) * (1 - VAL_FRACTION))
            return stream[:cut], stream[cut:], _file_hash(source)
    else:
        files = _text_files(source) if source.is_dir() else [source]
        if not files:
            raise UserError("data folder holds no files", file=str(source))

        def split():
            return _split_files(files, read)

    _check_text_size(files, source)
    finger = hashlib.sha256(tok_hash.encode())
    for p in files:
        finger.update(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}".encode())

    def make():
        train, val, digest = split()
        if len(train) == 0 or len(val) == 0:
            raise UserError("too little data for a train/val split", file=str(source))
        if tok_hash:
            digest = hashlib.sha256((digest + tok_hash).encode()).hexdigest()
        return train, val, {"hash": digest, "files": len(files)}

    train, val, meta = _cached_split(f"data-{finger.hexdigest()[:16]}", make)
    return TokenData(train, val, vocab, meta["hash"], str(source))


def check_fits(data: TokenData, vocab_size: int, seq_len: int) -> None:
    """Reject data the model cannot read, before any training starts: every token id below
    `vocab_size`, and both splits long enough for one window of `seq_len` (train and eval)."""
    if data.vocab_size > vocab_size:
        raise UserError(f"the data uses {data.vocab_size} token ids but the model has "
                        f"vocab_size={vocab_size}", file=data.source, key="vocab_size")
    for split, array in (("train", data.train), ("val", data.val)):
        if len(array) < seq_len + 1:
            raise UserError(f"the {split} split has {len(array)} tokens, fewer than "
                            f"seq_len + 1 = {seq_len + 1}", file=data.source, key="seq_len")


def train_offsets(n_tokens: int, seed: int, step: int, n_seq: int, seq_len: int) -> np.ndarray:
    """Random window starts for one optimizer step, a pure function of (seed, step)."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - seq_len, size=n_seq)


def val_offsets(n_tokens: int, eval_tokens: int, seq_len: int) -> np.ndarray:
    """Evenly spread windows over the validation split, the same for every trial."""
    n_seq = max(1, min(eval_tokens // seq_len, (n_tokens - 1) // seq_len))
    return np.linspace(0, n_tokens - seq_len - 1, n_seq).astype(np.int64)


def windows(tokens: np.ndarray, offsets: np.ndarray, seq_len: int):
    """(inputs, targets) int64 tensors of shape [len(offsets), seq_len]."""
    import torch

    index = offsets[:, None] + np.arange(seq_len + 1)
    chunk = torch.from_numpy(np.asarray(tokens[index], dtype=np.int64))
    return chunk[:, :-1], chunk[:, 1:]


def unigram_entropy(tokens: np.ndarray) -> float:
    """Entropy (nats/token) of the token frequencies: the loss of the best context-free model."""
    counts = np.bincount(np.asarray(tokens), minlength=1).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


class LMTask:
    """Batches for the loop: random training windows per step, fixed validation windows."""

    def __init__(self, data: TokenData, seq_len: int, seed: int, eval_tokens: int):
        self.data, self.seq_len, self.seed = data, seq_len, seed
        offsets = val_offsets(len(data.val), eval_tokens, seq_len)
        self.val_x, self.val_y = windows(data.val, offsets, seq_len)

    def train_batch(self, step: int, n_seq: int):
        offsets = train_offsets(len(self.data.train), self.seed, step, n_seq, self.seq_len)
        return windows(self.data.train, offsets, self.seq_len)
