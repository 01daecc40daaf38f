import numpy as np
import pytest
import torch

from tune_lowmem.data import DataConfig, cifar10
from tune_lowmem.data.batch import batch_tensors, host_data_tensors, split_rows


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
    out = cifar10.augment(images, *cifar10.draw_augmentation(64, torch.Generator().manual_seed(0)))
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
    images = [b.images() for b in first]
    assert len(first) == 2 and all(x.shape == (100, 3, 32, 32) for x in images)
    assert all(x.dtype == torch.uint8 and x.device.type == "cpu" for x in images)
    assert all(torch.equal(x, b.images()) for x, b in zip(images, again))
    assert not torch.equal(first[0].labels, other[0].labels)
    plain = torch.cat(
        [
            cifar10.normalize(b.images())
            for b in cifar10.train_batches(data.train, 250, 0, 0, augment_images=False)
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


def test_a_microbatch_gathers_and_augments_its_own_rows_as_the_whole_minibatch_would():
    """A minibatch holds rows and draws, not images: its microbatches' images, made one at a
    time, are the whole minibatch's bit for bit, and each is only its own rows' copy."""
    data = cifar10.Cifar10.from_config(
        DataConfig(train_subset=120, val_size=10, test_subset=10), seed=0
    )
    batch = next(cifar10.train_batches(data.train, 100, epoch=3, seed=1))
    whole = batch.images()
    parts = split_rows(batch, 30)
    assert [len(p.index) for p in parts] == [30, 30, 30, 10]
    assert all(p.split is batch.split for p in parts)  # the host copy is referred to, not cut
    assert torch.equal(torch.cat([p.images() for p in parts]), whole)
    assert torch.equal(torch.cat([p.labels for p in parts]), data.train.labels[batch.index])
    held = sum(t.nbytes for t in batch_tensors(batch))  # rows, labels and draws: no images
    assert 0 < held < whole.nbytes / 50
    assert [t is s for t, s in zip(host_data_tensors(batch), vars(data.train).values())] == [1, 1]
