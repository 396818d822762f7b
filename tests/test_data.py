"""Tests of vflkit.data on the real data in $VFLKIT_DATA and on small files of the same layout."""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import time

import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from PIL import Image

from vflkit import data as vdata
from vflkit.config import cache_dir, data_root
from vflkit.data import (
    CREDIT_CARD_COLUMNS,
    DATASETS,
    MIMIC3_DROPPED,
    MIMIC3_FEATURES,
    ImageData,
    TabularData,
    encode_criteo,
    load_dataset,
)
from vflkit.errors import ConfigError, DatasetCorruptError, DatasetNotFoundError

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@pytest.fixture(scope="module")
def mnist() -> ImageData:
    return load_dataset("mnist", download=False)


@pytest.fixture(scope="module")
def cifar10() -> ImageData:
    return load_dataset("cifar10", download=False, progress=False)


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A private, empty cache directory for tests that count cache files."""
    path = tmp_path / "cache"
    monkeypatch.setenv("VFLKIT_CACHE", str(path))
    return path


def _write_png(path, img: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = img.permute(1, 2, 0).numpy()
    Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr).save(path)


def _png_tree(base, splits, per_class=2, gray_at=None):
    """Write base/<split>/<class>/NNNN.png, pixel value = 10*class + index + 80*(split number)."""
    for s, split in enumerate(splits):
        for c, cls in enumerate(CIFAR_CLASSES):
            for i in range(per_class):
                value = 10 * c + i + 80 * s
                channels = 1 if (split, c, i) == gray_at else 3
                img = torch.full((channels, 32, 32), value, dtype=torch.uint8)
                _write_png(base / split / cls / f"{i + 1:04d}.png", img)


# ----------------------------------------------------------------------------- MNIST family


def test_mnist_matches_the_data_readme(mnist):
    """MNIST has the shapes, per-class counts, first labels and pixel means the data README gives."""
    assert mnist.x_train.shape == (60000, 1, 28, 28) and mnist.x_train.dtype == torch.uint8
    assert mnist.x_test.shape == (10000, 1, 28, 28) and mnist.y_train.dtype == torch.int64
    assert torch.bincount(mnist.y_train).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert torch.bincount(mnist.y_test).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert mnist.y_train[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert mnist.y_test[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert mnist.x_train.double().mean().item() / 255 == pytest.approx(0.1307, abs=5e-5)
    assert mnist.x_test.double().mean().item() / 255 == pytest.approx(0.1325, abs=5e-5)
    assert mnist.num_classes == 10 and mnist.image_shape == (1, 28, 28)
    assert mnist.classes == tuple(torchvision.datasets.MNIST.classes)
    assert (mnist.mean, mnist.std) == ((0.1307,), (0.3081,))


def test_fashion_mnist_alias_and_readme_facts():
    """'fmnist' loads FashionMNIST with 6000/1000 per class, the README's first labels and means."""
    fm = load_dataset("fmnist", download=False)
    assert fm.name == "fashion_mnist"
    assert torch.bincount(fm.y_train).tolist() == [6000] * 10
    assert torch.bincount(fm.y_test).tolist() == [1000] * 10
    assert fm.y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
    assert fm.y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
    assert fm.x_train.double().mean().item() / 255 == pytest.approx(0.2860, abs=5e-5)
    assert fm.x_test.double().mean().item() / 255 == pytest.approx(0.2868, abs=5e-5)
    assert fm.classes[0] == "T-shirt/top"


def _copy_mnist(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in (data_root() / "MNIST" / "raw").glob("*.gz"):
        shutil.copyfile(f, raw / f.name)
    return raw


def test_mnist_wrong_md5_is_corrupt(tmp_path):
    """A re-compressed .gz (same pixels, different bytes) fails torchvision's md5 with a clear error."""
    raw = _copy_mnist(tmp_path)
    labels = raw / "train-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(gzip.decompress(labels.read_bytes()), mtime=0))
    with pytest.raises(DatasetCorruptError) as info:
        load_dataset("mnist", root=tmp_path, download=False)
    assert "train-labels-idx1-ubyte.gz" in str(info.value) and "d53e105ee54ea40749a09fcbcd1e9432" in str(info.value)


def test_mnist_truncated_gzip_is_corrupt(tmp_path):
    """A truncated .gz is reported as corrupt even when checksums are skipped."""
    raw = _copy_mnist(tmp_path)
    images = raw / "t10k-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[:50000])
    with pytest.warns(UserWarning, match="verify=False"), pytest.raises(DatasetCorruptError, match="t10k-images"):
        load_dataset("mnist", root=tmp_path, download=False, verify=False)


def test_mnist_reads_uncompressed_idx_files(tmp_path, mnist):
    """The uncompressed IDX files torchvision extracts give the same tensors as the .gz files."""
    raw = _copy_mnist(tmp_path)
    for f in raw.glob("*.gz"):
        f.with_suffix("").write_bytes(gzip.decompress(f.read_bytes()))
        f.unlink()
    plain = load_dataset("mnist", root=tmp_path, download=False)
    assert torch.equal(plain.x_train, mnist.x_train) and torch.equal(plain.y_test, mnist.y_test)


@pytest.mark.parametrize("dataset, folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_altered_uncompressed_idx_files_are_corrupt(tmp_path, dataset, folder):
    """verify=True checks uncompressed IDX files too: 5000 altered labels are refused, not loaded."""
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    for f in (data_root() / folder / "raw").glob("*.gz"):
        (raw / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
    labels = raw / "train-labels-idx1-ubyte"
    data = bytearray(labels.read_bytes())
    data[8:8 + 5000] = bytes((b + 1) % 10 for b in data[8:8 + 5000])  # still valid labels 0..9
    labels.write_bytes(bytes(data))
    with pytest.raises(DatasetCorruptError, match="train-labels-idx1-ubyte: sha256 is .* the original's"):
        load_dataset(dataset, root=tmp_path, download=False)
    with pytest.warns(UserWarning, match="verify=False"):
        modified = load_dataset(dataset, root=tmp_path, download=False, verify=False)
    assert len(modified.y_train) == 60000


def test_failed_download_falls_through_to_not_found(tmp_path, monkeypatch):
    """When torchvision's download fails, the not-found error says so and why."""
    class MNIST(torchvision.datasets.MNIST):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("no network here")

    monkeypatch.setattr(torchvision.datasets, "MNIST", MNIST)
    with pytest.raises(DatasetNotFoundError, match="download failed: RuntimeError: no network here"):
        load_dataset("mnist", root=tmp_path, download=True)


# ----------------------------------------------------------------------------- errors and options


def test_missing_dataset_message_says_what_where_and_how(tmp_path):
    """The not-found error names the dataset, the expected files, the searched dir and the fixes."""
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", root=tmp_path, download=False)
    msg = str(info.value)
    assert "'mnist'" in msg and "MNIST/raw/train-images-idx3-ubyte.gz" in msg
    assert str(tmp_path / "MNIST" / "raw") in msg
    assert "VFLKIT_DATA" in msg and "./data/" in msg and "download=True" in msg and "https://" in msg


def test_missing_dataset_uses_env_root_and_offline_never_downloads(tmp_path, monkeypatch):
    """VFLKIT_DATA is the default root and VFLKIT_OFFLINE=1 turns the default download off."""
    monkeypatch.setenv("VFLKIT_DATA", str(tmp_path))
    monkeypatch.setenv("VFLKIT_OFFLINE", "1")
    monkeypatch.setattr(vdata, "_try_download", lambda *a: pytest.fail("download attempted while offline"))
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("cifar100")
    assert "cifar-100-python/train" in str(info.value) and str(tmp_path / "cifar-100-python") in str(info.value)


def test_datasets_without_downloader_say_where_to_get_them(tmp_path):
    """CINIC-10, Criteo, credit card and MIMIC-III errors point to their sources, MIMIC to PhysioNet."""
    expected = {"cinic10": "cinic-10/train", "criteo": "criteo/dac_sample.txt",
                "credit_card": "uci_credit_card/UCI_Credit_Card.csv", "mimic3": "mimic3/mimic3.csv"}
    for name, path in expected.items():
        with pytest.raises(DatasetNotFoundError) as info:
            load_dataset(name, root=tmp_path, download=True)
        assert path in str(info.value) and "VFLKIT_DATA" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="PhysioNet"):
        load_dataset("mimic3", root=tmp_path)


def test_unknown_dataset_and_option_list_the_valid_choices():
    """An unknown name or option is a ConfigError that lists what is valid."""
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar1000")
    assert all(name in str(info.value) for name in DATASETS) and "fmnist" in str(info.value)
    with pytest.raises(ConfigError, match="include_valid"):
        load_dataset("cinic10", include_vaild=True)
    with pytest.raises(ConfigError, match="source"):
        load_dataset("cifar10", source="jpeg", download=False)


# ----------------------------------------------------------------------------- CIFAR-10 PNG


def test_cifar10_png_matches_the_data_readme(cifar10):
    """The PNG tree decodes to 50k/10k RGB images with official labels, pixels and means."""
    assert cifar10.x_train.shape == (50000, 3, 32, 32) and cifar10.x_test.shape == (10000, 3, 32, 32)
    assert torch.bincount(cifar10.y_train).tolist() == [5000] * 10
    assert torch.bincount(cifar10.y_test).tolist() == [1000] * 10
    assert cifar10.classes == CIFAR_CLASSES
    frog, truck = 6 * 5000, 9 * 5000  # first image of each class folder
    assert cifar10.y_train[frog] == 6 and cifar10.y_train[truck] == 9
    assert cifar10.x_train[frog, 0, 0, :3].tolist() == [59, 43, 50]
    assert cifar10.x_train[frog, 2, -1, -3:].tolist() == [140, 84, 72]
    assert cifar10.x_train[truck, 0, 0, :3].tolist() == [154, 126, 105]
    assert cifar10.x_train[truck, 2, -1, -3:].tolist() == [139, 142, 144]
    mean = cifar10.x_train.sum(dim=(0, 2, 3), dtype=torch.int64).double() / (50000 * 1024 * 255)
    assert mean.tolist() == pytest.approx([0.4914, 0.4822, 0.4465], abs=1e-4)


def test_cifar10_second_load_hits_the_cache(cifar10, monkeypatch):
    """A second load reads the cache file (no PNG decoded) and gives identical tensors in ~1 s."""
    assert {p.name.split("-")[3] for p in cache_dir().glob("cifar10-png-*.pt")} >= {"test", "train"}
    monkeypatch.setattr(torchvision.io, "decode_png", lambda *a, **k: pytest.fail("decoded despite the cache"))
    start = time.perf_counter()
    again = load_dataset("cifar10", download=False, progress=False)
    assert time.perf_counter() - start < 10
    assert torch.equal(again.x_train, cifar10.x_train) and torch.equal(again.y_test, cifar10.y_test)


def _linked_cifar_tree(tmp_path):
    """A data root whose class folders link to the real ones, with its own (editable) manifests."""
    real = data_root() / "cifar10-png"
    for split in ("train", "test"):
        (tmp_path / "cifar10-png" / split).mkdir(parents=True)
        for cls in CIFAR_CLASSES:
            os.symlink(real / split / cls, tmp_path / "cifar10-png" / split / cls)
        shutil.copyfile(real / f"{split}.sha256", tmp_path / "cifar10-png" / f"{split}.sha256")
    return tmp_path / "cifar10-png" / "train.sha256"


def test_cifar10_png_sha256_mismatch_is_corrupt(tmp_path, own_cache):
    """A PNG whose sha256 differs from the manifest is named in a DatasetCorruptError."""
    manifest = _linked_cifar_tree(tmp_path)
    lines = manifest.read_text().splitlines()
    lines[0] = "0" * 64 + lines[0][64:]
    manifest.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetCorruptError, match="train/airplane/0001.png.*sha256"):
        load_dataset("cifar10", root=tmp_path, download=False, progress=False)


def test_cifar10_png_missing_manifest_entry_is_corrupt(tmp_path, own_cache):
    """A PNG that the manifest does not list is reported before anything is decoded."""
    manifest = _linked_cifar_tree(tmp_path)
    manifest.write_text("".join(manifest.read_text().splitlines(keepends=True)[1:]))
    with pytest.raises(DatasetCorruptError, match="not listed.*airplane/0001.png"):
        load_dataset("cifar10", root=tmp_path, download=False, progress=False)


def test_cifar10_png_tree_without_manifests_is_not_taken_as_verified(tmp_path, own_cache):
    """verify=True needs the sha256 manifests; without them only verify=False loads (with a warning)."""
    _linked_cifar_tree(tmp_path)
    (tmp_path / "cifar10-png" / "test.sha256").unlink()
    with pytest.raises(DatasetCorruptError, match=r"lacks the checksum manifest\(s\) test.sha256.*verify=False"):
        load_dataset("cifar10", root=tmp_path, download=False, progress=False)


# ----------------------------------------------------------------------------- CINIC-10 and the cache


def test_cinic10_tree_loads_with_valid_and_greyscale(tmp_path, own_cache):
    """CINIC-10's tree loads as RGB (greyscale converted), valid joins train on request."""
    _png_tree(tmp_path / "cinic-10", ["train", "valid", "test"], gray_at=("train", 3, 1))
    with pytest.warns(UserWarning, match="verify=False"):
        cinic = load_dataset("cinic10", root=tmp_path, verify=False, progress=False)
    assert cinic.x_train.shape == (20, 3, 32, 32) and cinic.x_test.shape == (20, 3, 32, 32)
    assert cinic.y_train.tolist() == [c for c in range(10) for _ in range(2)]
    assert cinic.x_train[7].unique().tolist() == [31]  # the greyscale image, class 3, index 1
    assert cinic.x_test[0].unique().tolist() == [160]
    with pytest.warns(UserWarning):
        both = load_dataset("cinic10", root=tmp_path, verify=False, include_valid=True, progress=False)
    assert both.x_train.shape[0] == 40 and both.x_train[20].unique().tolist() == [80]
    assert both.mean == pytest.approx((0.4789, 0.4723, 0.4305), abs=1e-4)


def test_png_decoding_falls_back_to_pillow(tmp_path, own_cache, monkeypatch):
    """Without torchvision's PNG decoder (deprecated in 0.29) Pillow decodes the same pixels."""
    _png_tree(tmp_path / "cinic-10", ["train", "test"], gray_at=("train", 3, 1))
    monkeypatch.delattr(torchvision.io, "decode_png")
    with pytest.warns(UserWarning):
        cinic = load_dataset("cinic10", root=tmp_path, verify=False, progress=False)
    assert cinic.x_train.shape == (20, 3, 32, 32) and cinic.x_train[7].unique().tolist() == [31]
    assert cinic.x_test[19].unique().tolist() == [80 + 91]


def test_cinic10_wrong_counts_are_corrupt(tmp_path, own_cache):
    """With verify (the default) a CINIC-10 tree without 9000 images per class is corrupt."""
    _png_tree(tmp_path / "cinic-10", ["train", "test"], per_class=1)
    with pytest.raises(DatasetCorruptError, match="expected 9000 each"):
        load_dataset("cinic10", root=tmp_path, progress=False)


def test_png_cache_is_reused_then_invalidated_by_a_changed_file(tmp_path, own_cache, monkeypatch):
    """The second load comes from the cache; rewriting one PNG gives a new key and fresh pixels."""
    _png_tree(tmp_path / "cinic-10", ["train", "test"])
    with pytest.warns(UserWarning):
        first = load_dataset("cinic10", root=tmp_path, verify=False, progress=False)
    assert len(list(own_cache.glob("cinic10-*-train-*.pt"))) == 1
    real_decode = torchvision.io.decode_png
    monkeypatch.setattr(torchvision.io, "decode_png", lambda *a, **k: pytest.fail("decoded despite the cache"))
    with pytest.warns(UserWarning):
        cached = load_dataset("cinic10", root=tmp_path, verify=False, progress=False)
    assert torch.equal(cached.x_train, first.x_train)
    monkeypatch.setattr(torchvision.io, "decode_png", real_decode)
    changed = tmp_path / "cinic-10" / "train" / "bird" / "0001.png"
    _write_png(changed, torch.full((3, 32, 32), 7, dtype=torch.uint8))
    os.utime(changed, ns=(0, 123))  # a different mtime even on coarse-clock file systems
    with pytest.warns(UserWarning):
        fresh = load_dataset("cinic10", root=tmp_path, verify=False, progress=False)
    assert fresh.x_train[4].unique().tolist() == [7] and torch.equal(fresh.x_train[5], first.x_train[5])
    assert len(list(own_cache.glob("cinic10-*-train-*.pt"))) == 1  # the stale file was removed


# ----------------------------------------------------------------------------- CIFAR pickles


def _write_cifar_pickles(folder, files: dict[str, dict]) -> None:
    folder.mkdir(parents=True)
    for name, content in files.items():
        with open(folder / name, "wb") as f:
            pickle.dump(content, f, protocol=2)


def _batch(n, label_key, n_classes, offset):
    rng = np.random.default_rng(offset)
    return {"batch_label": "test-made", label_key: [(offset + i) % n_classes for i in range(n)],
            "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            "filenames": [f"img_{offset + i}.png" for i in range(n)]}


def test_cifar10_pickles_made_here_are_not_taken_for_the_real_ones(tmp_path):
    """Test-made CIFAR-10 pickles fail the md5 check; unverified they parse in the official layout."""
    files = {f"data_batch_{k}": _batch(2, "labels", 10, 2 * k) for k in range(1, 6)}
    files["test_batch"] = _batch(3, "labels", 10, 50)
    files["batches.meta"] = {"label_names": list(CIFAR_CLASSES), "num_cases_per_batch": 2, "num_vis": 3072}
    _write_cifar_pickles(tmp_path / "cifar-10-batches-py", files)
    with pytest.raises(DatasetCorruptError, match="batches.meta: md5 is .* original's"):
        load_dataset("cifar10", root=tmp_path, download=False)
    with pytest.warns(UserWarning, match="not comparable"):
        c10 = load_dataset("cifar10", root=tmp_path, download=False, verify=False, source="pickle")
    assert c10.x_train.shape == (10, 3, 32, 32) and c10.x_test.shape == (3, 3, 32, 32)
    assert c10.y_train.tolist() == [(2 + i) % 10 for i in range(10)] and c10.classes == CIFAR_CLASSES
    row = files["data_batch_1"]["data"][1]
    assert c10.x_train[1, 0].flatten().tolist() == row[:1024].tolist()  # red plane first
    assert c10.x_train[1, 2].flatten().tolist() == row[2048:].tolist()


def test_cifar100_pickles_use_fine_labels(tmp_path):
    """CIFAR-100 pickles load with the 100 fine labels; test-made files fail the md5 check."""
    names = [f"class_{i}" for i in range(100)]
    _write_cifar_pickles(tmp_path / "cifar-100-python", {
        "train": {**_batch(4, "fine_labels", 100, 98), "coarse_labels": [0, 1, 2, 3]},
        "test": {**_batch(2, "fine_labels", 100, 7), "coarse_labels": [0, 1]},
        "meta": {"fine_label_names": names, "coarse_label_names": [f"c{i}" for i in range(20)]},
    })
    with pytest.raises(DatasetCorruptError, match="md5"):
        load_dataset("cifar100", root=tmp_path, download=False)
    with pytest.warns(UserWarning):
        c100 = load_dataset("cifar100", root=tmp_path, download=False, verify=False)
    assert c100.y_train.tolist() == [98, 99, 0, 1] and c100.num_classes == 100
    assert c100.mean == pytest.approx((0.5071, 0.4865, 0.4409))


def test_cifar_pickle_with_foreign_code_is_refused(tmp_path):
    """A pickle that would call a function other than numpy's array rebuild is not unpickled."""
    class Evil:
        def __reduce__(self):
            return (os.getcwd, ())

    files = {f"data_batch_{k}": _batch(1, "labels", 10, k) for k in range(1, 6)}
    files["test_batch"] = _batch(1, "labels", 10, 9)
    files["batches.meta"] = {"label_names": Evil()}
    _write_cifar_pickles(tmp_path / "cifar-10-batches-py", files)
    with pytest.warns(UserWarning), pytest.raises(DatasetCorruptError, match="posix.getcwd|os.getcwd"):
        load_dataset("cifar10", root=tmp_path, download=False, verify=False)


# ----------------------------------------------------------------------------- tabular


def test_breast_cancer_is_sklearns():
    """Breast Cancer Wisconsin is 569 x 30 with scikit-learn's feature names and 212 malignant."""
    bc = load_dataset("breast_cancer")
    assert bc.features.shape == (569, 30) and bc.task == "binary" and bc.num_classes == 2
    assert {"worst compactness", "concave points error", "mean texture"} <= set(bc.features.columns)
    assert int((bc.target == 0).sum()) == 212


def test_credit_card_has_uci_names_and_published_positives():
    """UCI Credit Card: 30000 x 23 features named X1..X23, ID index, 6636 defaults."""
    cc = load_dataset("credit_card")
    assert list(cc.features.columns) == [f"X{i}" for i in range(1, 24)]
    assert cc.features.shape == (30000, 23) and int(cc.target.sum()) == 6636
    assert cc.features.index.name == "ID" and cc.features.index.is_unique and cc.features.index[0] == 1
    assert cc.features.iloc[0][["X1", "X2", "X3", "X5", "X6"]].tolist() == [20000, 2, 2, 24, 2]
    assert CREDIT_CARD_COLUMNS["X3"] == "EDUCATION" and CREDIT_CARD_COLUMNS["X7"] == "PAY_2"
    assert CREDIT_CARD_COLUMNS["X23"] == "PAY_AMT6" and cc.categorical == ()


def test_credit_card_uci_header_and_corrupt_copies(tmp_path):
    """A CSV headed X1..X23,Y loads the same; duplicate IDs or missing rows are corrupt."""
    cc = load_dataset("credit_card")
    folder = tmp_path / "uci_credit_card"
    folder.mkdir()
    cc.features.assign(Y=cc.target).to_csv(folder / "uci.csv", index=False)
    same = load_dataset("credit_card", root=tmp_path, file="uci.csv")
    pd.testing.assert_frame_equal(same.features.reset_index(drop=True), cc.features.reset_index(drop=True))
    original = pd.read_csv(data_root() / "uci_credit_card" / "UCI_Credit_Card.csv")
    original.assign(ID=original["ID"].where(original["ID"] != 2, 1)).to_csv(folder / "dup.csv", index=False)
    with pytest.raises(DatasetCorruptError, match="ID is not unique"):
        load_dataset("credit_card", root=tmp_path, file="dup.csv")
    original.iloc[:-1].to_csv(folder / "short.csv", index=False)
    with pytest.raises(DatasetCorruptError, match="29999 rows, expected 30000"):
        load_dataset("credit_card", root=tmp_path, file="short.csv")


def test_credit_card_altered_copies_fail_verification(tmp_path):
    """Flipped labels or swapped columns under the right header are refused; verify=False loads them."""
    folder = tmp_path / "uci_credit_card"
    folder.mkdir()
    original = pd.read_csv(data_root() / "uci_credit_card" / "UCI_Credit_Card.csv")
    label = CREDIT_CARD_COLUMNS["Y"]
    flipped = original.copy()
    flipped.loc[:99, label] = 1 - flipped.loc[:99, label]
    flipped.to_csv(folder / "flipped.csv", index=False)
    swapped = original.copy()
    swapped[["BILL_AMT1", "BILL_AMT2"]] = swapped[["BILL_AMT2", "BILL_AMT1"]].to_numpy()
    swapped.to_csv(folder / "swapped.csv", index=False)
    renumbered = original.assign(ID=original["ID"] + 1)
    renumbered.to_csv(folder / "renumbered.csv", index=False)
    for name in ("flipped.csv", "swapped.csv"):
        with pytest.raises(DatasetCorruptError, match="values X1..X23,Y differ .* verify=False"):
            load_dataset("credit_card", root=tmp_path, file=name)
    with pytest.raises(DatasetCorruptError, match="IDs are not 1..30000"):
        load_dataset("credit_card", root=tmp_path, file="renumbered.csv")
    with pytest.warns(UserWarning, match="verify=False"):
        loaded = load_dataset("credit_card", root=tmp_path, file="flipped.csv", verify=False)
    assert int(loaded.target.sum()) != 6636
    # The same values re-written (pandas' own formatting, CRLF line ends) still verify.
    original.to_csv(folder / "rewritten.csv", index=False, lineterminator="\r\n")
    assert int(load_dataset("credit_card", root=tmp_path, file="rewritten.csv").target.sum()) == 6636


def test_criteo_samples_load_with_missing_values_marked():
    """Both Criteo samples load: 1999 rows/418 positives (Kaggle CSV), 200/49 (DeepCTR CSV)."""
    tiny = load_dataset("criteo")  # train.tiny.csv is the first present default here
    assert tiny.features.shape == (1999, 39) and int(tiny.target.sum()) == 418
    assert tiny.features.index[0] == 10000000 and tiny.features.index[-1] == 10001998
    assert tiny.categorical == tuple(f"C{i}" for i in range(1, 27))
    assert np.isnan(tiny.features.loc[10000000, "I12"]) and tiny.features.loc[10000000, "I13"] == 2.0
    assert tiny.features.loc[10000000, "C22"] == "" and tiny.features.loc[10000000, "C1"] == "68fd1e64"
    sample = load_dataset("criteo", file="criteo_sample.txt")
    assert sample.features.shape == (200, 39) and int(sample.target.sum()) == 49
    assert sample.features["I3"].iloc[0] == 260.0 and np.isnan(sample.features["I1"].iloc[0])


def test_criteo_tab_separated_train_txt_equals_kaggle_csv(tmp_path):
    """train.txt (label, I1..I13, C1..C26, tabs, no header) reads the same as the Kaggle CSV."""
    tiny = load_dataset("criteo", file="train.tiny.csv")
    lines = (data_root() / "criteo" / "train.tiny.csv").read_text().splitlines()[1:]
    (tmp_path / "criteo").mkdir()
    (tmp_path / "criteo" / "train.txt").write_text(
        "".join("\t".join(line.split(",")[1:]) + "\n" for line in lines))
    with pytest.raises(DatasetCorruptError, match="no checksum for other Criteo files.*verify=False"):
        load_dataset("criteo", root=tmp_path)
    with pytest.warns(UserWarning, match="verify=False"):
        txt = load_dataset("criteo", root=tmp_path, verify=False)
        assert len(load_dataset("criteo", root=tmp_path, nrows=10, verify=False).target) == 10
    pd.testing.assert_frame_equal(txt.features, tiny.features.reset_index(drop=True))
    assert txt.target.tolist() == tiny.target.tolist()


def test_rows_longer_than_the_header_are_corrupt_not_shifted(tmp_path):
    """A CSV or train.txt whose rows carry an extra field is refused instead of read shifted."""
    (tmp_path / "criteo").mkdir()
    (tmp_path / "criteo" / "train.txt").write_text("\t".join(["1"] * 41) + "\n")
    with pytest.warns(UserWarning, match="verify=False"), pytest.raises(DatasetCorruptError, match="more than the 40"):
        load_dataset("criteo", root=tmp_path, verify=False)
    (tmp_path / "uci_credit_card").mkdir()
    header = "ID," + ",".join(list(CREDIT_CARD_COLUMNS.values()))
    (tmp_path / "uci_credit_card" / "UCI_Credit_Card.csv").write_text(header + "\n" + ",".join(["1"] * 26) + "\n")
    with pytest.raises(DatasetCorruptError, match="more fields than its header"):
        load_dataset("credit_card", root=tmp_path)


def test_criteo_sample_with_a_flipped_label_fails_verification(tmp_path):
    """A published Criteo sample is checked against its sha256; one flipped label is refused."""
    (tmp_path / "criteo").mkdir()
    lines = (data_root() / "criteo" / "train.tiny.csv").read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[1] = "1" if fields[1] == "0" else "0"
    lines[1] = ",".join(fields)
    (tmp_path / "criteo" / "train.tiny.csv").write_text("".join(lines))
    with pytest.raises(DatasetCorruptError, match="the published train.tiny.csv's is 68f78521"):
        load_dataset("criteo", root=tmp_path)
    # The genuine sample verifies under another name too: the check is by content.
    shutil.copyfile(data_root() / "criteo" / "criteo_sample.txt", tmp_path / "criteo" / "sample.csv")
    assert len(load_dataset("criteo", root=tmp_path, file="sample.csv").target) == 200


def test_encode_criteo_dense_log_and_sparse_indices():
    """encode_criteo gives log(1+x) dense features, 0 for missing, and per-column indices."""
    tiny = load_dataset("criteo")
    dense, sparse, vocab = encode_criteo(tiny)
    assert dense.shape == (1999, 13) and dense.dtype == torch.float32
    assert sparse.shape == (1999, 26) and sparse.dtype == torch.int64 and len(vocab) == 26
    raw = tiny.features.loc[10000000]
    assert dense[0, 4].item() == pytest.approx(np.log1p(1382.0)) and dense[0, 3].item() == 0.0  # I5, I4 = 0
    assert dense[0, 11].item() == 0.0  # I12 missing
    assert sparse[0, 21].item() == 0 and sparse[0, 0].item() > 0  # C22 missing, C1 present
    assert all(int(sparse[:, j].max()) == vocab[j] - 1 for j in range(26))
    assert vocab[0] == tiny.features["C1"].replace("", np.nan).nunique() + 1
    _, rare, vocab2 = encode_criteo(tiny, min_count=5)
    assert all(v2 <= v for v, v2 in zip(vocab, vocab2)) and (rare == 0).sum() > (sparse == 0).sum()
    assert raw["C1"] == "68fd1e64"
    with pytest.raises(ConfigError):
        encode_criteo(tiny, min_count=0)


def _mimic3d(n, seed=0):
    """A table in the layout of mimic3d.csv (28 columns), random values."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"hadm_id": np.arange(100000, 100000 + n)})
    for col in ("gender", "admit_type", "admit_location", "AdmitDiagnosis", "insurance", "religion",
                "marital_status", "ethnicity", "AdmitProcedure"):
        df[col] = rng.choice(["A", "B"], size=n)
    df["LOSdays"] = rng.integers(0, 30, n)
    df["ExpiredHospital"] = rng.integers(0, 2, n)
    for col in MIMIC3_FEATURES:
        df[col] = rng.integers(0, 50, n)
    df["LOSgroupNum"] = np.arange(n) % 4
    return df


def test_mimic3_follows_vfedtrans_preprocessing(tmp_path):
    """A mimic3d.csv-layout file gives VFedTrans's 15 features and 4 length-of-stay classes."""
    (tmp_path / "mimic3").mkdir()
    _mimic3d(58976).sample(frac=1.0, axis=1, random_state=1).to_csv(tmp_path / "mimic3" / "mimic3.csv", index=False)
    m = load_dataset("mimic3", root=tmp_path)
    assert m.features.shape == (58976, 15) and set(m.features.columns) == set(MIMIC3_FEATURES)
    assert not set(MIMIC3_DROPPED) & set(m.features.columns)
    assert m.task == "multiclass" and m.num_classes == 4 and m.target.name == "LOSgroupNum"
    assert m.features.index.name == "hadm_id" and m.features.index[0] == 100000
    assert {"age", "NumCallouts", "NumDiagnosis", "NumProcs", "NumCPTevents"} <= set(m.features.columns)


def test_mimic3_generic_csv_and_wrong_sizes(tmp_path):
    """A 15-feature CSV with a named target loads unverified; wrong row or column counts are corrupt."""
    (tmp_path / "mimic3").mkdir()
    small = _mimic3d(100)[[*MIMIC3_FEATURES, "LOSgroupNum"]].rename(columns={"LOSgroupNum": "target"})
    small.to_csv(tmp_path / "mimic3" / "mimic3.csv", index=False)
    with pytest.raises(DatasetCorruptError, match="100 rows, expected 58976"):
        load_dataset("mimic3", root=tmp_path)
    with pytest.warns(UserWarning):
        m = load_dataset("mimic3", root=tmp_path, verify=False)
    assert m.features.shape == (100, 15) and m.target.name == "target"
    small.drop(columns=["NumRx"]).to_csv(tmp_path / "mimic3" / "mimic3.csv", index=False)
    with pytest.raises(DatasetCorruptError, match="14 feature columns"):
        load_dataset("mimic3", root=tmp_path, verify=False)


# ----------------------------------------------------------------------------- subset / normalize


def test_image_subset_is_deterministic(mnist):
    """subset draws the same images for the same seed, other images for another, and checks sizes."""
    a = mnist.subset(n_train=500, n_test=100, seed=3)
    b = mnist.subset(n_train=500, n_test=100, seed=3)
    c = mnist.subset(n_train=500, n_test=100, seed=4)
    assert a.x_train.shape == (500, 1, 28, 28) and torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_train, c.y_train)
    assert torch.equal(mnist.subset(n_test=100, seed=3).y_test, a.y_test)  # n_train does not shift the test draw
    assert mnist.subset(n_test=10).x_train is mnist.x_train  # None keeps all
    with pytest.raises(ConfigError, match="60001"):
        mnist.subset(n_train=60001)


def test_tabular_subset_is_deterministic():
    """TabularData.subset keeps ids and order, depends only on the seed, and checks n."""
    cc = load_dataset("credit_card")
    a, b = cc.subset(n=1000, seed=1), cc.subset(n=1000, seed=1)
    assert a.features.index.equals(b.features.index) and a.features.index.is_monotonic_increasing
    assert not a.features.index.equals(cc.subset(n=1000, seed=2).features.index)
    assert (a.target.index == a.features.index).all() and len(a.target) == 1000
    with pytest.raises(ConfigError):
        cc.subset(n=30001)


def test_normalize_converts_on_the_device(mnist):
    """normalize returns float32 (x/255 - mean)/std on the requested device; non-uint8 input is refused."""
    batch = mnist.x_train[:256]
    out = mnist.normalize(batch, "cpu")
    assert out.dtype == torch.float32 and out.device.type == "cpu" and out.shape == batch.shape
    expected = (batch.float() / 255 - 0.1307) / 0.3081
    assert torch.allclose(out, expected, atol=1e-6)
    assert out.min().item() == pytest.approx(-0.1307 / 0.3081, abs=1e-6)
    whole = mnist.normalize(mnist.x_train[:, :, :, :7])  # a party's vertical strip
    assert whole.shape == (60000, 1, 28, 7)
    with pytest.raises(ValueError, match="uint8"):
        mnist.normalize(batch.float())


def test_containers_check_their_contents():
    """ImageData and TabularData refuse inconsistent tensors and frames."""
    x, y = torch.zeros(4, 1, 2, 2, dtype=torch.uint8), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="y_train"):
        ImageData("toy", x, y[:3], x, y, ("a",), (0.5,), (0.5,))
    with pytest.raises(ValueError, match="uint8"):  # floats outside [0, 1] are no ToTensor output
        ImageData("toy", x.float() - 0.5, y, x, y, ("a",), (0.5,), (0.5,))
    with pytest.raises(ValueError, match="task"):
        TabularData("toy", pd.DataFrame({"a": [1, 2]}), pd.Series([0, 1]), "regression")


def _toy_images(**changes):
    """A valid 8-image, 2-class ImageData; ``changes`` replace its fields."""
    x = torch.zeros(8, 1, 4, 4, dtype=torch.uint8)
    y = torch.arange(8) % 2
    fields = dict(name="toy", x_train=x, y_train=y, x_test=x[:4], y_test=y[:4], classes=("a", "b"),
                  mean=(0.5,), std=(0.5,))
    return ImageData(**{**fields, **changes})


@pytest.mark.parametrize("changes, match", [
    ({"y_train": torch.tensor([0, 1, 2, 1, 0, 1, 0, 1])}, r"y_train holds label 2, outside 0..1"),
    ({"y_train": torch.tensor([0, -100, 0, 1, 0, 1, 0, 1])}, r"y_train holds label -100"),  # ignore_index
    ({"y_test": torch.tensor([0, 1, -1, 1])}, r"y_test holds label -1"),
    ({"std": (0.0,)}, r"std\[0\] must be a finite number > 0"),
    ({"mean": (float("nan"),)}, r"mean\[0\] must be a finite number"),
    ({"x_train": torch.zeros(0, 1, 4, 4, dtype=torch.uint8), "y_train": torch.zeros(0, dtype=torch.int64)},
     "the train set is empty"),
    ({"x_test": torch.zeros(0, 1, 4, 4, dtype=torch.uint8), "y_test": torch.zeros(0, dtype=torch.int64)},
     "the test set is empty"),
    ({"classes": ()}, "classes is empty"),
])
def test_image_data_refuses_labels_statistics_and_sets_that_train_wrong(changes, match):
    """Each once trained wrong (a -100 label silently ignored, an empty set 'trained') or failed
    late (inside torch, or as 'training diverged'): now a ConfigError when the data is built."""
    _toy_images()  # valid
    with pytest.raises(ConfigError, match=match):
        _toy_images(**changes)


@pytest.mark.parametrize("target, task, match", [
    ([0, 1, 2, 1], "binary", r"a binary target holds only 0 and 1, got values \[2\]"),
    ([0, 1, -1, 2], "multiclass", "target holds -1"),
    ([0, 1, float("nan"), 1], "binary", "holds NaN or a fraction"),
    (["a", "b", "a", "b"], "binary", "class indices"),
])
def test_tabular_data_refuses_targets_outside_its_classes(target, task, match):
    features = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0]})
    with pytest.raises(ConfigError, match=match):
        TabularData("toy", features, pd.Series(target), task)
    with pytest.raises(ConfigError, match="the table is empty"):
        TabularData("toy", features.iloc[:0], pd.Series([], dtype="int64"), "binary")
    assert TabularData("toy", features, pd.Series([0, 1, 1, 0]), "binary").num_classes == 2


def test_register_dataset_same_data_again_is_harmless_other_data_replaces_with_a_warning():
    import warnings

    name = vdata.register_dataset(_toy_images(name="reg_toy"))
    try:
        digest = vdata.registered_digest(name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert vdata.register_dataset(_toy_images(name="reg_toy")) == name  # equal data: no-op
        assert vdata.registered_digest(name) == digest
        other = _toy_images(name="reg_toy", y_train=1 - torch.arange(8) % 2)  # labels swapped
        with pytest.warns(UserWarning, match="registered with other data"):
            vdata.register_dataset(other)
        assert vdata.registered_digest(name) != digest and load_dataset(name) is other
        with pytest.raises(ConfigError, match="is taken"):
            vdata.register_dataset(_toy_images(name="mnist"))  # a built-in name still needs replace=True
        with pytest.raises(ConfigError, match="non-empty name"):
            vdata.register_dataset(_toy_images(), name=5)
        assert vdata.registered_digest("mnist") is None
    finally:
        vdata.unregister_dataset(name)


def test_an_altered_png_cache_is_rebuilt_when_verifying(tmp_path, own_cache, monkeypatch):
    """The decoded-tensor cache carries a digest of its tensors: with verify on, a cache whose
    pixels were changed (half zeroed, labels and shape intact, D30) is decoded again from the
    files instead of returned; with verify off it is trusted (the cheap path)."""
    _png_tree(tmp_path / "tree", ["train"])
    args = dict(tag="cifar10-png", classes=CIFAR_CLASSES, per_class=2, manifest=None, rgb=True, progress=False)
    x, y = vdata._decode_png_split(tmp_path, tmp_path / "tree" / "train", verify=True, **args)
    (cache,) = own_cache.glob("cifar10-png-*-train-*.pt")
    blob = torch.load(cache, weights_only=True)
    assert blob["sha256"] == vdata._tensor_digest(x, y)
    blob["x"][: len(x) // 2] = 0
    torch.save(blob, cache)
    with pytest.warns(UserWarning, match="do not match their digest"):
        again, _ = vdata._decode_png_split(tmp_path, tmp_path / "tree" / "train", verify=True, **args)
    assert torch.equal(again, x)
    # rebuilt: the next load is the cache again, intact, and decodes nothing
    monkeypatch.setattr(torchvision.io, "decode_png", lambda *a, **k: pytest.fail("decoded despite the cache"))
    cached, _ = vdata._decode_png_split(tmp_path, tmp_path / "tree" / "train", verify=True, **args)
    assert torch.equal(cached, x)


def test_your_own_images_from_scikit_learn_or_torchvision_train_with_computed_statistics(tmp_path):
    """Bring your own images as a torchvision user would: scikit-learn's digits as (image, label)
    pairs, no mean/std given (computed from the training pixels), registered twice harmlessly,
    then named by a run config of the split trainer."""
    import numpy as np
    from sklearn.datasets import load_digits

    from vflkit.data import ImageData, register_dataset, unregister_dataset
    from vflkit.methods import RunConfig
    from vflkit.training import split

    digits = load_digits()
    images = (digits.images * 255 / 16).astype(np.uint8)  # [N, 8, 8] in 0..255
    pairs = list(zip(images, digits.target))
    data = ImageData.from_torchvision("digits_mine", pairs[:1500], pairs[1500:])
    assert data.image_shape == (1, 8, 8) and data.num_classes == 10
    pixels = torch.from_numpy(images[:1500]).double() / 255
    assert data.mean[0] == pytest.approx(float(pixels.mean())) and data.std[0] == pytest.approx(float(pixels.std()))
    register_dataset(data)
    register_dataset(ImageData.from_torchvision("digits_mine", pairs[:1500], pairs[1500:]))  # the same data again
    try:
        rec = split.run(RunConfig(paper="demo", dataset="digits_mine", method="splitnn", models="mlp", n_parties=2,
                                  epochs=2, batch_size=64), profile="mine", device="cpu", results=tmp_path,
                        progress=False)
    finally:
        unregister_dataset("digits_mine")
    assert rec["final"]["active"]["test_accuracy"] > 0.5  # learns well above chance (0.1)


def test_totensor_float_images_are_the_uint8_images_they_came_from():
    """torchvision's ToTensor() output (floats in [0, 1]) is accepted, as the same pixels."""
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (20, 1, 8, 8), dtype=torch.uint8, generator=g)
    labels = torch.arange(20) % 4
    as_uint8 = ImageData.from_torchvision("t_u8", list(zip(pixels, labels)), list(zip(pixels, labels)))
    floats = TensorDataset(pixels.float() / 255, labels)  # what ToTensor() gives
    as_float = ImageData.from_torchvision("t_f", floats, floats)
    assert torch.equal(as_float.x_train, as_uint8.x_train) and as_float.mean == as_uint8.mean
    direct = ImageData("t_d", pixels.float() / 255, labels, pixels.float() / 255, labels, ("a", "b", "c", "d"))
    assert direct.x_test.dtype == torch.uint8 and torch.equal(direct.x_test, pixels)
    normalized = TensorDataset((pixels.float() / 255 - 0.5) / 0.25, labels)  # ToTensor then Normalize
    with pytest.raises(ConfigError, match=r"outside \[0, 1\].*without Normalize"):
        ImageData.from_torchvision("t_n", normalized, normalized)


def test_a_tables_n_train_beyond_its_rows_is_an_error_not_stored():
    """A study's n_train=4000 on a 178-row table: an error, never all rows trained under n_train 4000."""
    from sklearn.datasets import load_wine

    from vflkit.comm import Channel
    from vflkit.methods import RunConfig
    from vflkit.tabular import build_tabular_parties

    wine = load_wine(as_frame=True)
    table = TabularData("t_wine", wine.data, wine.target, "multiclass")
    config = RunConfig(paper="demo", dataset="t_wine", method="splitnn", models="mlp", n_train=4000)
    with pytest.raises(ConfigError, match=r"t_wine: n_train=4000 rows asked for, but the table's train split has 14\d"):
        build_tabular_parties(config, device="cpu", channel=Channel(), data=table)
    with pytest.raises(ConfigError, match="partition='grid' cuts images"):
        build_tabular_parties(config.replace(n_train=None, partition="grid"), device="cpu", channel=Channel(), data=table)
    parties, k = build_tabular_parties(config.replace(n_train=100), device="cpu", channel=Channel(), data=table)
    assert k == 3 and len(parties[0]._features["train"]) == 100


def test_a_registered_image_set_edited_by_torch_is_keyed_anew_at_once(monkeypatch):
    """An in-place torch edit of a registered image set's labels (torch counts it) gives the
    next key a new digest, with a warning; an edit that breaks the labels' range is refused as
    at registration; unchanged data reads no pixels for its key."""
    data = _toy_images(name="reg_edit")
    name = vdata.register_dataset(data)
    try:
        digest = vdata.registered_digest(name)
        with monkeypatch.context() as m:
            m.setattr(vdata, "content_digest", lambda d: pytest.fail("read the unchanged pixels"))
            assert vdata.registered_digest(name) == digest
        data.y_train[:] = 1 - data.y_train
        with pytest.warns(UserWarning, match="'reg_edit' changed since its content digest was taken"):
            assert vdata.registered_digest(name) not in (None, digest)
        data.y_train[0] = 7
        with pytest.raises(ConfigError, match="y_train holds label 7"):
            vdata.registered_digest(name)
    finally:
        vdata.unregister_dataset(name)


def test_a_target_indexed_otherwise_than_its_features_is_refused():
    """T05: a target taken from a re-sorted frame (its index reversed, its values to match) was
    paired with the features by position, silently mislabelled; now the indexes must agree."""
    features = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0]}, index=[10, 11, 12, 13])
    target = pd.Series([0, 1, 1, 0], index=[10, 11, 12, 13])
    TabularData("toy", features, target, "binary")  # the same index: paired row by row
    with pytest.raises(ConfigError, match=r"toy: the target's index is not the features' .*"
                                          r"target\.reindex\(features\.index\)"):
        TabularData("toy", features, target.iloc[::-1], "binary")
    with pytest.raises(ConfigError, match="the target's index is not the features'"):
        TabularData("toy", features, target.reset_index(drop=True), "binary")


@pytest.mark.parametrize("make, match", [
    (lambda: TabularData("one_class", pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0]}), pd.Series([0, 0, 0, 0]), "binary"),
     r"one_class: the target holds one class \(0\); a classifier needs at least two"),
    (lambda: TabularData("one_class", pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0]}), pd.Series([0, 0, 0, 0]),
                         "multiclass"), r"the target holds one class \(0\)"),
    (lambda: _toy_images(name="one_class", classes=("only",), y_train=torch.zeros(8, dtype=torch.int64),
                         y_test=torch.zeros(4, dtype=torch.int64)), r"one_class: 1 class \('only',\)"),
    (lambda: _toy_images(name="one_class", y_train=torch.ones(8, dtype=torch.int64)),
     r"one_class: the training labels are all 1"),
])
def test_a_dataset_of_fewer_than_two_classes_is_refused_at_registration(make, match):
    """T03, T04, T11: a binary table of all 0, a K = 1 table and an image set of one class
    trained to 100 % without a word; registering one is now a ConfigError (a subset of a
    registered dataset may hold one class: only what is handed over is checked)."""
    with pytest.raises(ConfigError, match=match):
        vdata.register_dataset(make())
    assert not vdata.is_registered("one_class")


def test_an_infinite_feature_is_named_not_left_to_read_as_divergence():
    """T02: an inf cell once poisoned its column's scaling and the run was recorded as diverged
    ("lower the learning rate"); now the table names the column, at once or when an edit in
    place is next seen; NaN stays a missing value (imputed) and a categorical column is codes."""
    features = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.5, -np.inf, 1.0, np.inf]}, index=[7, 8, 9, 10])
    target = pd.Series([0, 1, 1, 0], index=features.index)
    with pytest.raises(ConfigError, match=r"toy: feature column 'b' holds 2 infinite value\(s\) \(first at index 8\)"):
        TabularData("toy", features, target, "binary")
    TabularData("toy", features.assign(b=[0.5, np.nan, 1.0, 2.0]), target, "binary")  # missing: imputed
    TabularData("toy", features.astype({"b": str}), target, "binary", categorical=("b",))
    table = TabularData("inf_later", features.assign(b=[0.5, 0.1, 1.0, 2.0]), target, "binary")
    name = vdata.register_dataset(table)
    try:
        table.features.loc[9, "a"] = np.inf
        with pytest.raises(ConfigError, match="feature column 'a' holds 1 infinite"):
            vdata.registered_digest(name)
    finally:
        vdata.unregister_dataset(name)

