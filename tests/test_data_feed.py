"""Feeding a device: the decoded-data cache keyed by content, host-to-device copies."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from tune_lowmem.data import cifar10, to_device


def _jpeg_layout(root, shade: int):
    for split in ("train", "test"):
        folder = root / split / "cat"
        folder.mkdir(parents=True)
        image = np.full((32, 32, 3), shade, dtype=np.uint8)
        Image.fromarray(image).save(folder / "0001.jpg")
    return root


def test_the_same_data_laid_again_is_not_decoded_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNE_LOWMEM_CACHE", str(tmp_path / "cache"))
    first = _jpeg_layout(tmp_path / "a" / "cifar10-jpeg", shade=90)
    train, test = cifar10._cached(first)
    assert train.images.shape == (1, 32, 32, 3) and test.labels.tolist() == [3]
    again = tmp_path / "b" / "cifar10-jpeg"
    shutil.copytree(first, again)  # new place, new file times, same bytes
    for file in again.rglob("*.jpg"):
        os.utime(file, (1, 1))
    monkeypatch.setattr(cifar10, "_decode_jpegs", lambda source: pytest.fail("decoded again"))
    cached_train, _ = cifar10._cached(again)
    assert np.array_equal(cached_train.images, train.images)
    assert cifar10.content_key(again) == cifar10.content_key(first)


def test_changed_bytes_or_names_change_the_key(tmp_path):
    base = cifar10.content_key(_jpeg_layout(tmp_path / "a", shade=90))
    assert cifar10.content_key(_jpeg_layout(tmp_path / "b", shade=91)) != base
    renamed = _jpeg_layout(tmp_path / "c", shade=90)
    (renamed / "train" / "cat" / "0001.jpg").rename(renamed / "train" / "cat" / "0002.jpg")
    assert cifar10.content_key(renamed) != base


def test_an_archive_is_keyed_by_its_bytes(tmp_path):
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(b"abc" * 1000)
    key = cifar10.content_key(archive)
    os.utime(archive, (1, 1))
    assert cifar10.content_key(archive) == key
    archive.write_bytes(b"abd" * 1000)
    assert cifar10.content_key(archive) != key


def test_to_device_keeps_values_and_dtype_on_the_host():
    tensor = torch.arange(6, dtype=torch.int64)
    moved = to_device(tensor, "cpu")
    assert moved.device.type == "cpu" and torch.equal(moved, tensor)


@pytest.mark.gpu
def test_to_device_copies_through_pinned_memory_without_changing_values():
    tensor = torch.randint(0, 255, (1000, 3, 32, 32), dtype=torch.uint8)
    moved = to_device(tensor, "cuda")
    assert moved.device.type == "cuda" and torch.equal(moved.cpu(), tensor)
