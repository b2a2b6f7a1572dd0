"""Vision data and metrics for hourglass-mlp's residual-MLP tasks.

Images are held as uint8 tensors [N, C, H, W] (ImageNet-32 would not fit in memory as
floats) and turned into (input, target) vectors per batch:
  denoise  - input = image + N(0, noise_std) (fresh noise per step; fixed noise for val)
  superres - input = 2x bicubic downsample, target = the full image (training batches
             randomly flipped, hourglass-mlp's 4x augmentation)
  genclass - target = a fixed prototype image of the input's class (the first training
             image of each class), accuracy = nearest prototype to the output
Built in: scikit-learn's digits (8x8). From local files: MNIST (idx files or a Keras-
style npz) and ImageNet-32 (a folder of `*_data_batch_*.npz` + `val_data.npz`).
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F

from shapesweep.common import UserError

VAL_FRACTION = 0.15  # when the source has no validation split of its own


@dataclass
class ImageSet:
    train: torch.Tensor  # uint8 [N, C, H, W]
    train_labels: torch.Tensor  # int64 [N]
    val: torch.Tensor
    val_labels: torch.Tensor
    max_value: float  # pixel value that maps to 1.0
    data_hash: str
    source: str


def _split(pixels: np.ndarray, labels: np.ndarray, max_value: float, digest: str, source: str):
    """A fixed permutation (seed 0, the same for every trial); the last VAL_FRACTION is val."""
    order = np.random.default_rng(0).permutation(len(pixels))
    n_val = max(1, int(len(pixels) * VAL_FRACTION))
    tr, va = order[:-n_val], order[-n_val:]
    t = torch.from_numpy
    return ImageSet(t(pixels[tr]), t(labels[tr].astype(np.int64)), t(pixels[va]),
                    t(labels[va].astype(np.int64)), max_value, digest, source)


def load_digits_set() -> ImageSet:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.astype(np.uint8)[:, None]  # values 0..16
    digest = hashlib.sha256(pixels.tobytes() + digits.target.astype(np.int64).tobytes()).hexdigest()
    return _split(pixels, digits.target, 16.0, digest, "sklearn digits 8x8")


def _square(rows: np.ndarray, path: Path) -> np.ndarray:
    """[N, D] rows -> [N, C, H, W]: 3072 = 3x32x32 (ImageNet-32, channel-first), else 1xSxS."""
    d = rows.shape[1]
    if d == 3072:
        return rows.reshape(-1, 3, 32, 32)
    side = int(round(d**0.5))
    if side * side != d:
        raise UserError(f"image rows of length {d} are neither 3x32x32 nor square", file=str(path))
    return rows.reshape(-1, 1, side, side)


def _read_idx(path: Path) -> np.ndarray:
    """An MNIST idx file (optionally gzipped): magic, dims, then uint8 data."""
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 8 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise UserError("not an idx file of uint8 data", file=str(path))
    n_dims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(n_dims)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * n_dims)
    if data.size != int(np.prod(dims)):
        raise UserError(f"idx header says {dims} but holds {data.size} values", file=str(path))
    return data.reshape(dims)


def _mnist_idx(folder: Path) -> ImageSet:
    def find(stem: str) -> Path:
        for name in (stem, stem + ".gz"):
            if (folder / name).exists():
                return folder / name
        raise UserError(f"MNIST folder lacks {stem}[.gz]", file=str(folder))

    images_path, labels_path = find("train-images-idx3-ubyte"), find("train-labels-idx1-ubyte")
    images, labels = _read_idx(images_path), _read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise UserError("MNIST images/labels idx files do not match", file=str(folder))
    digest = hashlib.sha256(images_path.read_bytes() + labels_path.read_bytes()).hexdigest()
    return _split(images[:, None], labels, 255.0, digest, str(folder))


def _npz(path: Path) -> ImageSet:
    """Keras MNIST (`x_train`, `y_train`) or one ImageNet-32 batch (`data`, `labels`)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise UserError(f"not a readable .npz ({error})", file=str(path)) from error
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if "x_train" in archive and "y_train" in archive:
        images = archive["x_train"]
        if images.ndim == 3:
            images = images[:, None]
        return _split(images.astype(np.uint8), archive["y_train"], 255.0, digest, str(path))
    if "data" in archive and "labels" in archive:
        return _split(_square(archive["data"], path), archive["labels"], 255.0, digest, str(path))
    raise UserError(f"expected keys x_train/y_train or data/labels, found {sorted(archive)}",
                    file=str(path))


def _imagenet32(folder: Path) -> ImageSet:
    """Chrabaszcz et al.'s npz batches: train_data_batch_*.npz and val_data.npz; labels 1-based."""
    batches = sorted(folder.glob("*data_batch_*.npz"))
    val_path = folder / "val_data.npz"
    if not val_path.exists():
        raise UserError("ImageNet-32 folder lacks val_data.npz", file=str(folder))
    digest = hashlib.sha256()

    def read(path: Path):
        digest.update(path.read_bytes())
        archive = np.load(path, allow_pickle=False)
        if "data" not in archive or "labels" not in archive:
            raise UserError("expected keys data and labels", file=str(path))
        return _square(archive["data"], path), np.asarray(archive["labels"], dtype=np.int64) - 1

    parts = [read(p) for p in batches]
    val, val_labels = read(val_path)
    t = torch.from_numpy
    return ImageSet(t(np.concatenate([p[0] for p in parts])), t(np.concatenate([p[1] for p in parts])),
                    t(val), t(val_labels), 255.0, digest.hexdigest(), str(folder))


def load_images(path: str | None = None) -> ImageSet:
    if path is None:
        return load_digits_set()
    source = Path(path)
    if not source.exists():
        raise UserError("data path not found", file=str(source))
    if source.suffix == ".npz":
        return _npz(source)
    if source.is_dir() and any(source.glob("*data_batch_*.npz")):
        return _imagenet32(source)
    if source.is_dir() and any(source.glob("train-images-idx3-ubyte*")):
        return _mnist_idx(source)
    raise UserError("expected the digits built-in, an MNIST folder (idx files), an .npz, or an "
                    "ImageNet-32 folder (*_data_batch_*.npz)", file=str(source))


def downsample(images: torch.Tensor) -> torch.Tensor:
    """2x bicubic downsampling (hourglass-mlp's super-resolution inputs)."""
    h, w = images.shape[-2:]
    return F.interpolate(images, size=(h // 2, w // 2), mode="bicubic", antialias=True,
                         align_corners=False)


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image PSNR (dB) for data in [0, 1], torchmetrics' definition so numbers compare
    with other papers'; predictions are clamped to that range."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    return peak_signal_noise_ratio(pred.clamp(0, 1), target, data_range=1.0, reduction="none",
                                   dim=tuple(range(1, target.ndim)))


def ssim(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-image SSIM: torchmetrics' (Wang et al. 2004: 11x11 gaussian window, sigma 1.5)."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    per_image = structural_similarity_index_measure(pred.clamp(0, 1), target, data_range=1.0,
                                                    reduction="none")
    return cast(torch.Tensor, per_image)  # a pair only with return_full_image


class VisionTask:
    """Turns an ImageSet into (input, target) vectors for one of hourglass-mlp's tasks."""

    def __init__(self, images: ImageSet, task: str, noise_std: float, seed: int,
                 eval_images: int):
        self.images, self.task, self.noise_std, self.seed = images, task, noise_std, seed
        self.shape = tuple(images.train.shape[1:])
        if task == "genclass":
            classes = torch.unique(images.train_labels)
            first = [int(torch.nonzero(images.train_labels == k)[0]) for k in classes]
            self.classes = classes
            self.prototypes = self._float(images.train[first])
        n_val = min(len(images.val), eval_images)
        self.val_pixels, self.val_labels = images.val[:n_val], images.val_labels[:n_val]
        self.val_x, self.val_y = self.pairs(self.val_pixels, self.val_labels,
                                            torch.Generator().manual_seed(2**31 - 1))

    def _float(self, pixels: torch.Tensor) -> torch.Tensor:
        return pixels.float() / self.images.max_value

    @property
    def d_x(self) -> int:
        return int(np.prod(self.val_x.shape[1:]))

    @property
    def d_out(self) -> int:
        return int(np.prod(self.val_y.shape[1:]))

    def pairs(self, pixels, labels, generator: torch.Generator):
        clean = self._float(pixels)
        if self.task == "denoise":
            noise = torch.randn(clean.shape, generator=generator) * self.noise_std
            return (clean + noise).flatten(1), clean.flatten(1)
        if self.task == "superres":
            return downsample(clean).flatten(1), clean.flatten(1)
        index = torch.searchsorted(self.classes, labels)
        return clean.flatten(1), self.prototypes[index].flatten(1)

    def train_batch(self, step: int, batch_size: int):
        """(input, target) for one optimizer step, a pure function of (seed, step)."""
        rng = np.random.default_rng([self.seed, step])
        n = len(self.images.train)
        index = torch.from_numpy(rng.choice(n, size=min(batch_size, n), replace=False))
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        pixels = self.images.train[index]
        if self.task == "superres":  # hourglass-mlp's 4x augmentation: none, h-, v-, hv-flip
            flips = torch.from_numpy(rng.integers(0, 4, size=len(index)))
            pixels = torch.where((flips % 2 == 1)[:, None, None, None], pixels.flip(-1), pixels)
            pixels = torch.where((flips >= 2)[:, None, None, None], pixels.flip(-2), pixels)
        return self.pairs(pixels, self.images.train_labels[index], generator)

    def metrics(self, pred: torch.Tensor) -> dict[str, float]:
        """Image-quality metrics of val predictions [N, d_out] (float32, CPU)."""
        target = self.val_y.view(-1, *self.shape)
        pred_img = pred.view(-1, *self.shape)
        out = {"psnr": psnr(pred_img, target).mean().item(),
               "ssim": ssim(pred_img, target).mean().item()}
        if self.task == "genclass":
            nearest = torch.cdist(pred, self.prototypes.flatten(1)).argmin(1)
            out["accuracy"] = (self.classes[nearest] == self.val_labels).float().mean().item()
        return out

    def baseline_psnr(self) -> float:
        """PSNR of the trivial answer: the input itself (denoise), its nearest-neighbour upsample
        (superres), or the mean target (genclass)."""
        target = self.val_y.view(-1, *self.shape)
        if self.task == "denoise":
            guess = self.val_x.view(-1, *self.shape)
        elif self.task == "superres":
            small = self.val_x.view(-1, self.shape[0], self.shape[1] // 2, self.shape[2] // 2)
            guess = F.interpolate(small, size=self.shape[1:], mode="nearest")
        else:
            guess = self.val_y.mean(0, keepdim=True).expand_as(self.val_y).reshape(target.shape)
        return psnr(guess, target).mean().item()
