"""Tests for vflkit.partition: strips, grids, columns, APC-VFL partitions, alignment, label owners."""

import json

import pandas as pd
import pytest
import torch

from vflkit.errors import PartitionError
from vflkit.partition import (
    NIID_SCENARIOS,
    Alignment,
    Partition,
    apc_vfl_active_features,
    apc_vfl_partition,
    check_aligned,
    columns,
    grid,
    intersect_ids,
    label_owner_split,
    partial_alignment,
    strips,
)

BREAST_CANCER = [
    "mean radius", "mean texture", "mean perimeter", "mean area", "mean smoothness", "mean compactness",
    "mean concavity", "mean concave points", "mean symmetry", "mean fractal dimension",
    "radius error", "texture error", "perimeter error", "area error", "smoothness error", "compactness error",
    "concavity error", "concave points error", "symmetry error", "fractal dimension error",
    "worst radius", "worst texture", "worst perimeter", "worst area", "worst smoothness", "worst compactness",
    "worst concavity", "worst concave points", "worst symmetry", "worst fractal dimension",
]
CREDIT_X = [f"X{i}" for i in range(1, 24)]
CREDIT_CSV = ["LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE", "PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5",
              "PAY_6"] + [f"BILL_AMT{i}" for i in range(1, 7)] + [f"PAY_AMT{i}" for i in range(1, 7)]


def _images(n, shape):
    return torch.arange(n * shape[0] * shape[1] * shape[2], dtype=torch.float32).reshape(n, *shape)


# -- strips and grids ---------------------------------------------------------------------------


def test_mnist_strips_width_and_height():
    """1x28x28 into 4: width strips are 28 high x 7 wide, height strips 7 high x 28 wide."""
    x = _images(3, (1, 28, 28))
    wide = strips(4, image_shape=(1, 28, 28))
    tall = strips(4, image_shape=(1, 28, 28), axis="height")
    assert [tuple(p.shape) for p in wide.split(x)] == [(3, 1, 28, 7)] * 4
    assert [tuple(p.shape) for p in tall.split(x)] == [(3, 1, 7, 28)] * 4
    assert wide.party_shape(2) == (1, 28, 7) and tall.party_shape(2) == (1, 7, 28)
    assert torch.equal(wide.split(x)[1], x[..., 7:14]) and torch.equal(tall.split(x)[3], x[:, :, 21:28, :])


def test_cifar_strips_keep_channels():
    """3x32x32 strips keep all three channels and cut only the chosen axis."""
    part = strips(4, image_shape=(3, 32, 32))
    assert [tuple(p.shape) for p in part.split(_images(2, (3, 32, 32)))] == [(2, 3, 32, 8)] * 4


def test_strips_are_views():
    """Splitting does not copy the dataset: each strip shares storage with the input."""
    x = _images(4, (1, 28, 28))
    parts = strips(4, image_shape=(1, 28, 28)).split(x)
    assert all(p.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for p in parts)


@pytest.mark.parametrize("axis", ["width", "height"])
@pytest.mark.parametrize("n", range(2, 11))
def test_strips_cover_every_pixel_once(n, axis):
    """For C = 2..10 strips the party widths sum to 28 and assemble restores the image."""
    x = _images(2, (1, 28, 28))
    part = strips(n, image_shape=(1, 28, 28), axis=axis)
    parts = part.split(x)
    sizes = [p.shape[-1] if axis == "width" else p.shape[-2] for p in parts]
    assert len(parts) == n and sum(sizes) == 28
    assert max(sizes) - min(sizes) <= 1
    mask = torch.zeros(1, 28, 28, dtype=torch.int64)
    for start, stop in part.slices:
        if axis == "width":
            mask[..., start:stop] += 1
        else:
            mask[:, start:stop, :] += 1
    assert torch.equal(mask, torch.ones_like(mask))
    assert torch.equal(part.assemble(parts), x)


def test_uneven_strips_follow_tensor_split():
    """28 into 3 gives 10, 9, 9 and 28 into 10 gives eight 3s and two 2s, as torch.tensor_split."""
    three = strips(3, image_shape=(1, 28, 28))
    ten = strips(10, image_shape=(1, 28, 28))
    assert [three.party_shape(k)[2] for k in range(3)] == [10, 9, 9]
    assert [ten.party_shape(k)[2] for k in range(10)] == [3] * 8 + [2] * 2
    assert [t.shape[-1] for t in torch.tensor_split(torch.zeros(28), 10)] == [3] * 8 + [2] * 2


def test_grid_2x2_row_major_tiles():
    """A 2x2 grid of 3x32x32 gives four 3x16x16 tiles: top-left, top-right, bottom-left, bottom-right."""
    x = _images(2, (3, 32, 32))
    part = grid(2, 2, image_shape=(3, 32, 32))
    tl, tr, bl, br = part.split(x)
    assert [tuple(t.shape) for t in (tl, tr, bl, br)] == [(2, 3, 16, 16)] * 4
    assert torch.equal(tl, x[..., :16, :16]) and torch.equal(tr, x[..., :16, 16:])
    assert torch.equal(bl, x[..., 16:, :16]) and torch.equal(br, x[..., 16:, 16:])
    assert part.n_parties == 4 and part.grid_shape == (2, 2)
    assert torch.equal(part.assemble([tl, tr, bl, br]), x)


def test_grid_assembles_feature_maps():
    """assemble stitches per-tile feature maps of another size (AdptVFedConv's server side)."""
    part = grid(2, 2, image_shape=(3, 32, 32))
    maps = [torch.full((2, 64, 4, 4), float(k)) for k in range(4)]
    out = part.assemble(maps)
    assert out.shape == (2, 64, 8, 8)
    assert out[0, 0, 0, 0] == 0 and out[0, 0, 0, 7] == 1 and out[0, 0, 7, 0] == 2 and out[0, 0, 7, 7] == 3


def test_active_and_passive_parties():
    """The active index is explicit; passive lists the others; describe() is JSON-able."""
    part = strips(4, image_shape=(1, 28, 28), active=2)
    info = json.loads(json.dumps(part.describe()))
    assert part.active == 2 and part.passive == [0, 1, 3]
    assert info["parties"][2]["role"] == "active" and info["parties"][0]["role"] == "passive"
    assert info["parties"][3]["holds"] == {"width": [21, 28]} and info["parties"][3]["shape"] == [1, 28, 7]


# -- columns ------------------------------------------------------------------------------------


def test_columns_by_names():
    """Named groups pick those columns, in the group's order, and assemble restores the row."""
    names = ["a", "b", "c", "d", "e"]
    part = columns(names, [["d", "a"], ["b", "c", "e"]], active=1)
    x = torch.arange(10.0).reshape(2, 5)
    first, second = part.split(x)
    assert torch.equal(first, x[:, [3, 0]]) and torch.equal(second, x[:, [1, 2, 4]])
    assert part.party_shape(0) == (2,) and part.active == 1
    assert torch.equal(part.assemble([first, second]), x)


def test_columns_by_counts_and_number():
    """Counts take consecutive columns (views); an int splits as evenly as strips do."""
    names = [f"f{i}" for i in range(7)]
    x = torch.arange(14.0).reshape(2, 7)
    by_counts = columns(names, [2, 5])
    a, b = by_counts.split(x)
    assert by_counts.slices == (("f0", "f1"), ("f2", "f3", "f4", "f5", "f6"))
    assert a.data_ptr() == x.data_ptr() and torch.equal(b, x[:, 2:])
    assert [len(s) for s in columns(names, 3).slices] == [3, 2, 2]


def test_split_frame():
    """split_frame gives each party its named DataFrame columns and drops unassigned ones (the label)."""
    df = pd.DataFrame({"a": [1, 2], "b": [3, 4], "c": [5, 6], "label": [0, 1]})
    parts = columns(["a", "b", "c"], [["c"], ["a", "b"]]).split_frame(df)
    assert list(parts[0].columns) == ["c"] and list(parts[1].columns) == ["a", "b"]
    assert parts[1]["b"].tolist() == [3, 4]


# -- errors -------------------------------------------------------------------------------------


def test_partition_errors_say_what_is_wrong():
    """Impossible or inconsistent partitions raise PartitionError naming the problem."""
    shape = (1, 28, 28)
    cases = [
        (lambda: strips(29, image_shape=shape), "use at most 28 parties"),
        (lambda: strips(0, image_shape=shape), "positive integer"),
        (lambda: strips(4, image_shape=shape, axis="depth"),
         "Invalid strip axis 'depth'; choose one of width, height"),
        (lambda: strips(4, image_shape=(28, 28)), r"\(C, H, W\)"),
        (lambda: strips(4, image_shape=shape, active=4),
         "active party index 4 is out of range for 4 parties"),
        (lambda: strips(4, image_shape=shape, active=-1), "out of range"),
        (lambda: grid(3, 2, image_shape=(3, 32, 32)), "does not divide a 32x32 image"),
        (lambda: grid(2, 2, image_shape=(3, 32, 32), active=7), "out of range"),
        (lambda: columns(["a", "b"], 3), "use at most 2 parties"),
        (lambda: columns(["a", "b"], [1, 1, 1]), "only 2 columns"),
        (lambda: columns(["a", "b", "c"], [1, 1]), "sum to 2, but there are 3 columns"),
        (lambda: columns(["a", "b", "c"], [["a", "b"], ["b", "c"]]), "'b' is held by parties 0 and 1"),
        (lambda: columns(["a", "b", "c"], [["a"], ["b"]]), r"features \['c'\] are held by no party"),
        (lambda: columns(["a", "b"], [["a"], ["z"]]), r"unknown column names \['z'\] for party 1"),
        (lambda: columns(["a", "b"], [["a", "b"], []]), "party 1 holds no features"),
        (lambda: columns(["a", "a"], [1, 1]), "appears twice"),
        (lambda: columns(["a", "b"], [["a"], ["b"]], active=2), "out of range for 2 parties"),
        (lambda: Partition("diagonal", ((0, 1),), (1, 1, 1)), "Invalid partition kind 'diagonal'"),
        (lambda: Partition("strips", ((0, 10), (12, 28)), shape, axis="width"), "cover"),
    ]
    for build, message in cases:
        with pytest.raises(PartitionError, match=message):
            build()


def test_split_and_assemble_reject_wrong_inputs():
    """A tensor of the wrong shape, the wrong number of parts, or split_frame on images are errors."""
    part = strips(4, image_shape=(1, 28, 28))
    with pytest.raises(PartitionError, match=r"expected samples of shape \(1, 28, 28\)"):
        part.split(torch.zeros(2, 1, 32, 32))
    with pytest.raises(PartitionError, match="needs 4 parts, one per party, got 3"):
        part.assemble(part.split(torch.zeros(2, 1, 28, 28))[:3])
    with pytest.raises(PartitionError, match="split_frame needs a column partition"):
        part.split_frame(pd.DataFrame({"a": [1]}))
    with pytest.raises(PartitionError, match=r"lacks columns \['b'\]"):
        columns(["a", "b"], 2).split_frame(pd.DataFrame({"a": [1]}))


# -- APC-VFL ------------------------------------------------------------------------------------


def test_apc_vfl_breast_cancer_features():
    """Breast Cancer: the initial five, then worst compactness, concave points error and
    smoothness error move to the passive participant in that order."""
    expected = {
        2: {"mean texture", "worst fractal dimension"},
        3: {"mean texture", "worst fractal dimension", "smoothness error"},
        4: {"mean texture", "worst fractal dimension", "concave points error", "smoothness error"},
        5: {"mean texture", "worst fractal dimension", "worst compactness", "concave points error",
            "smoothness error"},
    }
    for n, features in expected.items():
        part = apc_vfl_partition("breast_cancer", n, BREAST_CANCER)
        assert set(part.slices[0]) == features and part.active == 0 and part.n_parties == 2
        assert set(part.slices[1]) == set(BREAST_CANCER) - features and len(part.slices[1]) == 30 - n


def test_apc_vfl_credit_card_features_with_both_namings():
    """Credit Card: X3, X5, X7 leave the initial five in that order; CSV names (EDUCATION, AGE, PAY_*) match too."""
    expected = {2: {"X9", "X11"}, 3: {"X7", "X9", "X11"}, 4: {"X5", "X7", "X9", "X11"},
                5: {"X3", "X5", "X7", "X9", "X11"}}
    csv = {"X3": "EDUCATION", "X5": "AGE", "X7": "PAY_2", "X9": "PAY_4", "X11": "PAY_6"}
    for n, features in expected.items():
        assert set(apc_vfl_partition("credit_card", n, CREDIT_X).slices[0]) == features
        csv_part = apc_vfl_partition("UCI Credit Card", n, CREDIT_CSV)
        assert set(csv_part.slices[0]) == {csv[f] for f in features}
    assert apc_vfl_active_features("mimic3", 3) == ("Age", "NumCallouts", "NumDiagnosis")


def test_apc_vfl_errors():
    """Unknown datasets, feature counts outside 2..5 and missing columns are errors."""
    with pytest.raises(PartitionError, match="Invalid APC-VFL dataset 'iris'; choose one of breast_cancer"):
        apc_vfl_partition("iris", 3, BREAST_CANCER)
    with pytest.raises(PartitionError, match="2, 3, 4 or 5 features"):
        apc_vfl_partition("breast_cancer", 6, BREAST_CANCER)
    with pytest.raises(PartitionError, match="needs feature 'X9'"):
        apc_vfl_partition("credit_card", 2, CREDIT_X[:5])


# -- alignment ----------------------------------------------------------------------------------


def test_partial_alignment_counts():
    """Breast Cancer setup: 500 of 569 at the active participant, 100 aligned, the 69 others passive-only."""
    al = partial_alignment(569, n_active=500, n_aligned=100, seed=3)
    assert al.active_ids.numel() == 500 and al.n_aligned == 100 and al.passive_ids.numel() == 169
    assert torch.equal(al.aligned_ids, intersect_ids(al.active_ids, al.passive_ids))
    passive_only = al.passive_ids[~torch.isin(al.passive_ids, al.aligned_ids)]
    assert torch.equal(torch.sort(torch.cat([al.active_ids, passive_only])).values, torch.arange(569))
    assert (~torch.isin(al.active_ids, al.aligned_ids)).sum() == 400
    assert al.describe() == {"n_active": 500, "n_passive": 169, "n_aligned": 100}


def test_partial_alignment_explicit_passive_and_determinism():
    """n_passive fixes the passive size; a seed fixes the ids; aligned sets nest across n_aligned."""
    a = partial_alignment(20000, n_active=10000, n_aligned=2500, n_passive=5000, seed=1)
    b = partial_alignment(20000, n_active=10000, n_aligned=2500, n_passive=5000, seed=1)
    c = partial_alignment(20000, n_active=10000, n_aligned=2500, n_passive=5000, seed=2)
    more = partial_alignment(20000, n_active=10000, n_aligned=7500, n_passive=10000, seed=1)
    assert a.passive_ids.numel() == 5000 and (~torch.isin(a.passive_ids, a.aligned_ids)).sum() == 2500
    assert torch.equal(a.active_ids, b.active_ids) and torch.equal(a.passive_ids, b.passive_ids)
    assert not torch.equal(a.aligned_ids, c.aligned_ids)
    assert torch.equal(more.active_ids, a.active_ids) and torch.isin(a.aligned_ids, more.aligned_ids).all()


def test_alignment_errors():
    """Impossible alignments and inconsistent Alignment objects are errors."""
    with pytest.raises(PartitionError, match="n_aligned=300 exceeds n_active=200"):
        partial_alignment(569, n_active=200, n_aligned=300)
    with pytest.raises(PartitionError, match="n_active=600 exceeds the pool"):
        partial_alignment(569, n_active=600, n_aligned=100)
    with pytest.raises(PartitionError, match="only 69 ids"):
        partial_alignment(569, n_active=500, n_aligned=100, n_passive=200)
    with pytest.raises(PartitionError, match="at least n_aligned=100"):
        partial_alignment(569, n_active=500, n_aligned=100, n_passive=50)
    with pytest.raises(PartitionError, match="n_aligned must be a positive integer"):
        partial_alignment(569, n_active=500, n_aligned=0)
    with pytest.raises(PartitionError, match="aligned_ids must be exactly"):
        Alignment(torch.tensor([1, 2, 3]), torch.tensor([2, 3, 4]), torch.tensor([2]))
    with pytest.raises(PartitionError, match="must be sorted"):
        Alignment(torch.tensor([3, 1]), torch.tensor([1]), torch.tensor([1]))


def test_intersect_and_check_aligned():
    """intersect_ids is the sorted common ids; check_aligned demands the same ids in the same order."""
    assert intersect_ids(torch.tensor([5, 1, 3, 9]), torch.tensor([9, 3, 4]), [3, 9, 10]).tolist() == [3, 9]
    check_aligned(torch.tensor([4, 2, 7]), torch.tensor([4, 2, 7]))
    mismatch = r"1 ids only at party 1 \(e.g. \[8\]\), 1 ids missing there \(e.g. \[7\]\)"
    with pytest.raises(PartitionError, match=mismatch):
        check_aligned(torch.tensor([4, 2, 7]), torch.tensor([4, 2, 8]))
    with pytest.raises(PartitionError, match="different row order"):
        check_aligned(torch.tensor([4, 2, 7]), torch.tensor([2, 4, 7]))
    with pytest.raises(PartitionError, match="more than once"):
        intersect_ids(torch.tensor([1, 1, 2]))
    with pytest.raises(PartitionError, match="integer sample ids"):
        check_aligned(torch.tensor([1.0, 2.0]))


# -- label owners -------------------------------------------------------------------------------


def _mnist_like_labels():
    # MNIST's training-set class counts, shuffled: the real pool Multi-VFL draws from
    counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    y = torch.cat([torch.full((c,), k) for k, c in enumerate(counts)])
    return y[torch.randperm(y.numel(), generator=torch.Generator().manual_seed(0))]


@pytest.mark.parametrize("scenario", ["1niid", "2niid", "3niid", "4niid"])
def test_label_owner_split_matches_table3(scenario):
    """Each owner gets 5000 disjoint samples whose label set is exactly Table 3's."""
    y = _mnist_like_labels()
    owners = label_owner_split(y, scenario=scenario, seed=0)
    assert len(owners) == 5
    for idx, expected in zip(owners, NIID_SCENARIOS[scenario]):
        assert idx.numel() == 5000 and idx.dtype == torch.int64
        assert set(y[idx].tolist()) == set(expected)
    everything = torch.cat(owners)
    assert torch.unique(everything).numel() == everything.numel()


def test_table3_constant():
    """NIID_SCENARIOS is Table 3: k non-IID owners at the end, with labels {0,1}, {2,3}, ... in turn."""
    assert NIID_SCENARIOS["1niid"][4] == (0, 1)
    assert NIID_SCENARIOS["3niid"][2:] == ((0, 1), (2, 3), (4, 5))
    assert NIID_SCENARIOS["4niid"] == (tuple(range(10)), (0, 1), (2, 3), (4, 5), (6, 7))


def test_label_owner_split_determinism_and_options():
    """Same seed, same owners; iid gives every owner all classes; disjoint=False may reuse samples."""
    y = _mnist_like_labels()
    a = label_owner_split(y, scenario="2niid", seed=4)
    b = label_owner_split(y, scenario="2niid", seed=4)
    c = label_owner_split(y, scenario="2niid", seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a, b)) and not torch.equal(a[0], c[0])
    iid = label_owner_split(y, scenario="iid", n_owners=3, samples_per_owner=2000)
    assert len(iid) == 3 and all(set(y[i].tolist()) == set(range(10)) for i in iid)
    big = label_owner_split(y, scenario="iid", n_owners=2, samples_per_owner=40000, disjoint=False)
    assert all(i.numel() == 40000 for i in big)


def test_label_owner_split_errors():
    """Too few samples of a class, wrong owner counts and unknown scenarios are errors."""
    y = _mnist_like_labels()
    small = torch.cat([torch.zeros(3000, dtype=torch.int64), torch.ones(1000, dtype=torch.int64),
                       torch.arange(10).repeat(3000)])
    with pytest.raises(PartitionError, match=r"label owner 5 needs 5000 samples of labels \{0, 1\}"):
        label_owner_split(small, scenario="1niid", samples_per_owner=5000)
    with pytest.raises(PartitionError, match="Invalid label-owner scenario '5niid'; choose one of iid, 1"):
        label_owner_split(y, scenario="5niid")
    with pytest.raises(PartitionError, match="Table 3 with 5 label owners; got n_owners=4"):
        label_owner_split(y, scenario="2niid", n_owners=4)
    with pytest.raises(PartitionError, match="needs samples of label 7"):
        label_owner_split(y[y != 7], scenario="4niid")
    with pytest.raises(PartitionError, match="only 0 are left after the other owners took theirs"):
        label_owner_split(y, scenario="iid", n_owners=13, samples_per_owner=5000)


# --------------------------------------------------------------------------------------------
# EASTER Table VI: the first C of 10 fixed parts
# --------------------------------------------------------------------------------------------


def test_first_parts_of_ten_image_strips():
    """32 px cut into 10 strips (4, 4, 3, ..., 3); C parties hold the first C, whatever C is."""
    from vflkit.partition import first_parts

    x = torch.arange(2 * 3 * 32 * 32).reshape(2, 3, 32, 32)
    widths = {c: [b - a for a, b in first_parts(c, image_shape=(3, 32, 32)).partition.slices]
              for c in (2, 4, 6, 8, 10)}
    assert widths[10] == [4, 4, 3, 3, 3, 3, 3, 3, 3, 3]
    assert all(widths[c] == widths[10][:c] for c in widths)
    parts = first_parts(4, image_shape=(3, 32, 32))
    assert parts.kept == 14 and parts.partition.input_shape == (3, 32, 14) and parts.active == 0
    pieces = parts.split(x)
    assert [tuple(p.shape) for p in pieces] == [(2, 3, 32, 4), (2, 3, 32, 4), (2, 3, 32, 3), (2, 3, 32, 3)]
    assert torch.equal(torch.cat(pieces, dim=-1), x[..., :14])  # the features right of 14 px are held by no one
    # C = 10 holds every pixel, exactly as strips(10) does.
    full = first_parts(10, image_shape=(3, 32, 32))
    assert full.partition == strips(10, image_shape=(3, 32, 32))
    assert first_parts(3, image_shape=(1, 28, 28)).describe()["kept"] == 9  # 28 -> eight 3s, two 2s
    with pytest.raises(PartitionError, match="C <= n_parts"):
        first_parts(11, image_shape=(3, 32, 32))
    with pytest.raises(PartitionError, match="expected samples"):
        parts.select(x[..., :30])


def test_first_parts_of_ten_columns():
    """39 columns cut into 10 groups (nine of 4, then 3); C parties hold the first C groups."""
    from vflkit.partition import first_parts

    names = [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    parts = first_parts(3, feature_names=names)
    assert parts.partition.slices == (("I1", "I2", "I3", "I4"), ("I5", "I6", "I7", "I8"),
                                      ("I9", "I10", "I11", "I12"))
    x = torch.arange(5 * 39, dtype=torch.float32).reshape(5, 39)
    assert torch.equal(torch.cat(parts.split(x), dim=1), x[:, :12])
    ten = first_parts(10, feature_names=names)
    assert [len(g) for g in ten.partition.slices] == [4] * 9 + [3]
    assert ten.partition == columns(names, 10)
    with pytest.raises(PartitionError, match="exactly one"):
        first_parts(2)
