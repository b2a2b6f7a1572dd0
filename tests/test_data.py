"""Every data source loads from real files; bad data fails with one clear UserError."""

from __future__ import annotations

import gzip
import math
import sys

import numpy as np
import pytest
import torch

from shapesweep.common import UserError
from shapesweep.search_spaces.configs import TrainConfig, make_config
from shapesweep.trainers import data as lm_data
from shapesweep.trainers import vision_data
from shapesweep.trainers.loop import train


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.getbasetemp() / "shapesweep-cache"
    monkeypatch.setenv("SHAPESWEEP_CACHE", str(folder))
    return folder


def test_builtin_corpus_is_the_stdlib_cached_and_hashed(cache):
    first = lm_data.builtin_corpus()
    second = lm_data.builtin_corpus()  # served from the .npy cache
    assert isinstance(second.train, np.memmap) and second.train.dtype == np.uint8
    assert first.data_hash == second.data_hash and len(first.data_hash) == 64
    assert len(first.train) > 2_000_000 and 0.01 < len(first.val) / len(first.train) < 0.2
    assert b"def " in bytes(first.train[:200_000]) and b"import" in bytes(first.val[:100_000])
    assert first.vocab_size == 256
    assert 2.5 < lm_data.unigram_entropy(first.val) < 4.5  # nats/byte of Python source


def test_text_file_and_folder_are_bytes(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"hello world\n" * 500)
    single = lm_data.load_lm_data(str(text))
    assert len(single.train) + len(single.val) == 6000 and single.vocab_size == 256
    assert bytes(single.train[:11]) == b"hello world"
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(20):
        (folder / f"{i:02d}.txt").write_bytes(f"document {i}\n".encode() * 50)
    split = lm_data.load_lm_data(str(folder))
    assert bytes(split.val[:11]) == b"document 19"  # the last file is validation
    assert b"document 19" not in bytes(split.train)


def test_nanogpt_bin_pair_and_npy(tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, 1000, 5000, dtype=np.uint16).tofile(tmp_path / "train.bin")
    rng.integers(0, 1000, 500, dtype=np.uint16).tofile(tmp_path / "val.bin")
    pair = lm_data.load_lm_data(str(tmp_path))
    assert len(pair.train) == 5000 and len(pair.val) == 500 and pair.vocab_size <= 1000
    assert pair.vocab_size > 990
    for dtype in (np.uint16, np.uint32):
        path = tmp_path / f"tokens_{np.dtype(dtype).name}.npy"
        ids = np.arange(4000, dtype=dtype) * (17 if dtype == np.uint32 else 1)  # > 65535 in uint32
        np.save(path, ids)
        stream = lm_data.load_lm_data(str(path))
        assert len(stream.train) + len(stream.val) == 4000
        assert stream.vocab_size == int(ids.max()) + 1 and stream.train.dtype == dtype


def test_parquet_text_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": [f"row {i} of the table" for i in range(300)]}), path)
    tokens = lm_data.load_lm_data(str(path))
    assert bytes(tokens.train[:18]) == b"row 0 of the table"
    pq.write_table(pa.table({"body": ["x"] * 10}), tmp_path / "bad.parquet")
    with pytest.raises(UserError, match="no `text` column") as error:
        lm_data.load_lm_data(str(tmp_path / "bad.parquet"))
    assert error.value.key == "text" and error.value.file.endswith("bad.parquet")


def _tokenizer_json(tmp_path, text: str):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([text], trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path, tokenizer


def test_hf_tokenizer_json(tmp_path):
    text = "the quick brown fox jumps over the lazy dog and the cat\n" * 200
    (tmp_path / "corpus.txt").write_text(text)
    path, tokenizer = _tokenizer_json(tmp_path, text)
    tokens = lm_data.load_lm_data(str(tmp_path / "corpus.txt"), tokenizer=str(path))
    expected = tokenizer.encode(text).ids
    assert list(tokens.train[:20]) == expected[:20]
    assert tokens.vocab_size == tokenizer.get_vocab_size() and tokens.train.dtype == np.uint16
    byte_level = lm_data.load_lm_data(str(tmp_path / "corpus.txt"))
    assert byte_level.data_hash != tokens.data_hash  # the tokenizer is part of the identity


def test_tokenizer_without_package_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "corpus.txt").write_text("some text\n" * 50)
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # what an uninstalled package looks like
    with pytest.raises(UserError, match="pip install tokenizers"):
        lm_data.load_lm_data(str(tmp_path / "corpus.txt"), tokenizer=str(tmp_path / "tokenizer.json"))


@pytest.mark.parametrize("name, content, problem", [
    ("odd.bin", b"\x00\x01\x02", "odd byte size"),
    ("floats.npy", None, "1-D uint16 or uint32"),
    ("missing.txt", "absent", "not found"),
    ("empty.npy", "empty", "token file is empty"),
])
def test_bad_token_files(tmp_path, name, content, problem):
    path = tmp_path / name
    if content is None:
        np.save(path, np.zeros(100, dtype=np.float32))
    elif content == "empty":
        np.save(path, np.zeros(0, dtype=np.uint16))
    elif content != "absent":
        path.write_bytes(content)
    with pytest.raises(UserError, match=problem) as error:
        lm_data.load_lm_data(str(path))
    assert error.value.file == str(path)


def test_data_vocab_larger_than_model_is_rejected(tmp_path):
    np.save(tmp_path / "big.npy", np.arange(5000, dtype=np.uint16))
    config = make_config(dict(family="conventional", d_model=16, n_layers=1, n_heads=2, d_h=32))
    with pytest.raises(UserError, match="5000 token ids .* vocab_size=256") as error:
        train(config, TrainConfig(steps=2, seq_len=16), data=str(tmp_path / "big.npy"))
    assert error.value.key == "vocab_size"


def test_batches_are_a_pure_function_of_seed_and_step():
    tokens = np.arange(10_000, dtype=np.uint16)
    a = lm_data.train_offsets(len(tokens), seed=3, step=7, n_seq=8, seq_len=32)
    b = lm_data.train_offsets(len(tokens), seed=3, step=7, n_seq=8, seq_len=32)
    c = lm_data.train_offsets(len(tokens), seed=3, step=8, n_seq=8, seq_len=32)
    assert (a == b).all() and not (a == c).all()
    x, y = lm_data.windows(tokens, a, 32)
    assert x.shape == (8, 32) and (y[:, :-1] == x[:, 1:]).all() and x.dtype == torch.int64


# ---- vision ----

def test_digits_builtin():
    images = vision_data.load_images()
    assert images.train.shape[1:] == (1, 8, 8) and images.train.dtype == torch.uint8
    assert len(images.train) + len(images.val) == 1797 and images.max_value == 16
    task = vision_data.VisionTask(images, "superres", 0.25, 0, 10_000)
    assert task.d_x == 16 and task.d_out == 64
    _, targets = task.train_batch(0, 64)  # flipped 3 times in 4 (hourglass-mlp's augmentation)
    as_stored = torch.cdist(targets, images.train.flatten(1).float() / 16).min(1).values < 1e-6
    assert 5 < int(as_stored.sum()) < 40
    genclass = vision_data.VisionTask(images, "genclass", 0.25, 0, 10_000)
    assert genclass.prototypes.shape == (10, 1, 8, 8)
    # the prototype is an exact training image of that class
    perfect = genclass.metrics(genclass.val_y)
    assert perfect["accuracy"] == 1.0 and perfect["ssim"] == pytest.approx(1.0, abs=1e-5)


def _write_idx(path, array: np.ndarray, gz: bool):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    (gzip.open if gz else open)(path, "wb").write(header + array.astype(np.uint8).tobytes())


def test_mnist_idx_folder_and_npz(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (60, 28, 28), dtype=np.uint8)
    labels = np.arange(60) % 10
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, gz=True)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", labels, gz=False)
    loaded = vision_data.load_images(str(tmp_path))
    assert loaded.train.shape[1:] == (1, 28, 28) and len(loaded.train) + len(loaded.val) == 60
    assert vision_data.VisionTask(loaded, "superres", 0.25, 0, 100).d_x == 196
    np.savez(tmp_path / "mnist.npz", x_train=images, y_train=labels)
    keras = vision_data.load_images(str(tmp_path / "mnist.npz"))
    assert torch.equal(keras.train, loaded.train) and keras.max_value == 255


def test_imagenet32_batches(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in (("train_data_batch_1.npz", 40), ("train_data_batch_2.npz", 30), ("val_data.npz", 20)):
        np.savez(tmp_path / name, data=rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 labels=rng.integers(1, 1001, n))
    images = vision_data.load_images(str(tmp_path))
    assert images.train.shape == (70, 3, 32, 32) and images.val.shape == (20, 3, 32, 32)
    assert int(images.train_labels.min()) >= 0  # 1-based labels shifted
    task = vision_data.VisionTask(images, "denoise", 0.25, 0, 100)
    assert task.d_x == task.d_out == 3072


def test_vision_config_that_does_not_fit_the_data():
    config = make_config(dict(family="vision_mlp", d_x=64, d_z=32, d_h=8, n_layers=1, task="superres"))
    with pytest.raises(UserError, match="needs d_x=16") as error:
        train(config, TrainConfig(steps=2))
    assert error.value.key == "d_x"


def test_bad_vision_files(tmp_path):
    np.savez(tmp_path / "odd.npz", pixels=np.zeros((3, 5)))
    with pytest.raises(UserError, match="x_train/y_train or data/labels"):
        vision_data.load_images(str(tmp_path / "odd.npz"))
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"garbage!")
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"garbage!")
    with pytest.raises(UserError, match="not an idx file"):
        vision_data.load_images(str(tmp_path))


def test_psnr_and_ssim_values():
    """Known values, so the metrics are the standard ones (torchmetrics' definitions)."""
    target = torch.rand(4, 1, 8, 8)
    assert vision_data.ssim(target, target).min().item() == pytest.approx(1.0, abs=1e-6)
    noisy = (target + 0.1).clamp(0, 1)
    expected = 10 * torch.log10(1 / (noisy - target).pow(2).flatten(1).mean(1))
    assert torch.allclose(vision_data.psnr(noisy, target), expected)
    assert vision_data.ssim(torch.rand(4, 1, 8, 8), target).mean() < 0.5
    for offset in (0.01, 0.1, 0.25):  # a constant offset d: PSNR = 20 log10(1 / d)
        image = torch.rand(3, 3, 16, 16, dtype=torch.float64) * 0.5
        assert vision_data.psnr(image + offset, image).tolist() == pytest.approx(
            [20 * math.log10(1 / offset)] * 3)
    # On a flat image only SSIM's luminance term is left: (2 c (c + d) + C1) / (c² + (c + d)² + C1)
    for level, offset in ((0.3, 0.1), (0.5, 0.2)):
        flat = torch.full((1, 1, 16, 16), level, dtype=torch.float64)
        known = (2 * level * (level + offset) + 0.01**2) / (level**2 + (level + offset) ** 2 + 0.01**2)
        assert vision_data.ssim(flat + offset, flat).item() == pytest.approx(known, rel=1e-9)
