import numpy as np
import pytest
import torch

from tune_lowmem.data import DataConfig, cifar10


def test_search_split_is_45000_5000_seeded_and_disjoint():
    a = cifar10.Cifar10.from_config(DataConfig(), seed=3)
    b = cifar10.Cifar10.from_config(DataConfig(), seed=3)
    c = cifar10.Cifar10.from_config(DataConfig(), seed=4)
    assert (len(a.train), len(a.val), len(a.test)) == (45_000, 5_000, 10_000)
    assert torch.equal(a.val.images, b.val.images)
    assert not torch.equal(a.val.images, c.val.images)
    train_rows = {bytes(x) for x in a.train.images[:2000].numpy()}
    assert not train_rows & {bytes(x) for x in a.val.images.numpy()}
    assert np.bincount(a.test.labels.numpy()).tolist() == [1000] * 10


def test_final_split_trains_on_all_50000():
    data = cifar10.Cifar10.from_config(DataConfig(split="final"), seed=0)
    assert len(data.train) == 50_000 and data.val is None


def test_subset_option():
    data = cifar10.Cifar10.from_config(
        DataConfig(train_subset=300, val_size=50, test_subset=70), seed=0
    )
    assert (len(data.train), len(data.val), len(data.test)) == (300, 50, 70)


def test_augmentation_is_crop_and_flip_of_the_padded_image():
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    out = cifar10.augment(images, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    for i in range(8):  # every output is some 32x32 window of the padded image, maybe mirrored
        windows = [padded[i, :, dy : dy + 32, dx : dx + 32] for dy in range(9) for dx in range(9)]
        assert any(torch.equal(out[i], w) or torch.equal(out[i], w.flip(2)) for w in windows)
    assert not torch.equal(out, images)


def test_batches_are_host_uint8_deterministic_and_full_and_normalise_on_their_device():
    data = cifar10.Cifar10.from_config(
        DataConfig(train_subset=250, val_size=10, test_subset=10), seed=0
    )
    first = list(cifar10.train_batches(data.train, 100, epoch=0, seed=0))
    again = list(cifar10.train_batches(data.train, 100, epoch=0, seed=0))
    other = list(cifar10.train_batches(data.train, 100, epoch=1, seed=0))
    assert len(first) == 2 and all(x.shape == (100, 3, 32, 32) for x, _ in first)
    assert all(x.dtype == torch.uint8 and x.device.type == "cpu" for x, _ in first)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))
    assert not torch.equal(first[0][1], other[0][1])
    plain = torch.cat(
        [
            cifar10.normalize(x)
            for x, _ in cifar10.train_batches(data.train, 250, 0, 0, augment_images=False)
        ]
    )
    assert abs(float(plain.mean())) < 0.3 and 0.7 < float(plain.std()) < 1.3
    images = data.train.images[:8]
    mean, std = (
        torch.tensor(cifar10.MEAN).view(1, 3, 1, 1),
        torch.tensor(cifar10.STD).view(1, 3, 1, 1),
    )
    assert torch.equal(cifar10.normalize(images), (images.float() / 255.0 - mean) / std)


def test_missing_data_names_the_field(tmp_path, monkeypatch):
    monkeypatch.setattr(
        cifar10,
        "_from_torchvision",
        lambda root, download=False: (_ for _ in ()).throw(OSError("offline")),
    )
    with pytest.raises(FileNotFoundError, match="data.root: no CIFAR-10"):
        cifar10.Cifar10.from_config(DataConfig(root=str(tmp_path)), seed=0)
