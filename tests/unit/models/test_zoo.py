"""The zoo's models: Table 1 sizes, signatures, determinism, shared backbones, fx tracing."""

from __future__ import annotations

import functools
import hashlib

import pytest
import torch
import torch.fx

from infless.errors import UnknownModel
from infless.models.build import build_meta_module, build_seeded_module, state_nbytes
from infless.models.loader import apply_postprocess
from infless.models.package import encode_manifest
from infless.models.zoo import FAMILIES, TABLE1_MODELS, ZOO, zoo_entry
from tests.unit.models.inputs import as_outputs, random_inputs

MIB = 1024 * 1024
# Big models run at batch 1-2 only, to keep the suite short on a shared machine.
TRANSFER_VARIANTS = ("resnet-50-tl-a", "resnet-50-tl-b", "resnet-50-tl-c", "resnet-50-tl-d")
BATCH_SIZES: dict[str, tuple[int, int]] = {
    "bert-v1": (1, 2),
    "vggnet": (1, 2),
    **dict.fromkeys(TRANSFER_VARIANTS, (1, 2)),
    **dict.fromkeys([name for family in FAMILIES.values() for name in family], (1, 2)),
}


RESNET50_FAMILY = ("resnet-50", *TRANSFER_VARIANTS)


@functools.cache
def _resnet50_family_member(name: str) -> torch.nn.Module:
    """Built once per session: the forward and the shared-backbone tests both need them."""
    assert name in RESNET50_FAMILY
    return build_seeded_module(ZOO[name])


def _seeded(name: str) -> torch.nn.Module:
    return (
        _resnet50_family_member(name) if name in RESNET50_FAMILY else build_seeded_module(ZOO[name])
    )


def test_table1_has_the_papers_eleven_models() -> None:
    assert set(TABLE1_MODELS) == {
        "bert-v1", "resnet-50", "vggnet", "lstm-2365", "resnet-20", "ssd",
        "dssm-2365", "yamnet", "mobilenet", "textcnn-69", "mnist",
    }  # fmt: skip
    assert {"resnet-20-cifar", *TRANSFER_VARIANTS} <= set(ZOO)


@pytest.mark.parametrize("name", TABLE1_MODELS)
def test_fp32_weights_within_25_percent_of_table1(name: str) -> None:
    entry = ZOO[name]
    assert entry.table_size_mib is not None
    module = build_meta_module(entry)
    assert all(t.dtype == torch.float32 for t in module.parameters())
    ratio = state_nbytes(module) / (entry.table_size_mib * MIB)
    assert 0.75 <= ratio <= 1.25, f"{name}: {ratio:.2f}× Table 1's {entry.table_size_mib} MiB"


@pytest.mark.parametrize(
    ("name", "millions"),
    [("resnet-18", 11.7), ("resnet-34", 21.8), ("resnet-101", 44.5), ("resnet-152", 60.2),
     ("bert-base", 109.5), ("bert-mini", 11.2)],
)  # fmt: skip
def test_families_have_their_published_parameter_counts(name: str, millions: float) -> None:
    module = build_meta_module(ZOO[name])
    parameters = sum(p.numel() for p in module.parameters()) / 1e6
    assert abs(parameters - millions) / millions < 0.03, f"{name}: {parameters:.1f} M"


def test_bert_heads_share_the_encoder() -> None:
    classifier, qa = ZOO["bert-base"], ZOO["bert-base-qa"]
    assert classifier.seed == qa.seed
    assert qa.seed_for("qa_outputs.weight") != classifier.seed_for("classifier.weight")
    assert qa.seed_for("layers.0.attention.query.weight") == classifier.seed


def test_resnet20_cifar_is_the_standard_small_one() -> None:
    module = build_meta_module(ZOO["resnet-20-cifar"])
    parameters = sum(p.numel() for p in module.parameters())
    assert 260_000 <= parameters <= 280_000


@pytest.mark.parametrize("name", list(ZOO))
def test_manifest_kwargs_survive_json(name: str) -> None:
    """Zoo kwargs are JSON-native, so a built package's manifest compares equal to the zoo's."""
    import msgspec

    from infless.models.package import PackageManifest

    manifest = ZOO[name].manifest()
    decoded = msgspec.json.decode(encode_manifest(manifest), type=PackageManifest)
    assert decoded == manifest


@pytest.mark.parametrize("name", list(ZOO))
def test_forward_matches_signature(name: str) -> None:
    entry = ZOO[name]
    module = _seeded(name)
    assert not module.training
    small, large = BATCH_SIZES.get(name, (1, 4))
    batch = random_inputs(entry.inputs, large, seed=7)
    with torch.no_grad():
        outputs = as_outputs(module(*batch))
        single = as_outputs(module(*(t[:small] for t in batch)))
    assert len(outputs) == len(entry.outputs)
    for output, one, spec in zip(outputs, single, entry.outputs, strict=True):
        assert str(output.dtype) == f"torch.{spec.dtype}", spec.name
        assert tuple(output.shape) == (large, *spec.shape), spec.name
        assert tuple(one.shape) == (small, *spec.shape), spec.name
        assert torch.isfinite(output.float()).all(), spec.name
    # A sample's result does not depend on its batch (detections: compare the scores only).
    compared = [1] if name == "ssd" else range(len(outputs))
    for index in compared:
        torch.testing.assert_close(single[index], outputs[index][:small], rtol=1e-3, atol=1e-4)
    # The outputs depend on the inputs (seeded weights are not degenerate).
    assert not torch.allclose(outputs[0][0], outputs[0][1], rtol=1e-3, atol=1e-4)
    if entry.postprocess:
        named = {spec.name: out for spec, out in zip(entry.outputs, outputs, strict=True)}
        processed = apply_postprocess(entry.postprocess, named)
        first = processed[entry.outputs[0].name]
        if entry.postprocess == "softmax":
            torch.testing.assert_close(first.sum(dim=-1), torch.ones(large))
        assert ((first >= 0) & (first <= 1)).all()


@pytest.mark.parametrize("name", list(ZOO))
def test_traceable_with_torch_fx(name: str) -> None:
    graph_module = torch.fx.symbolic_trace(build_meta_module(ZOO[name]))
    placeholders = [n.target for n in graph_module.graph.nodes if n.op == "placeholder"]
    assert placeholders == [spec.name for spec in ZOO[name].inputs]


@pytest.mark.parametrize("name", ["mnist", "resnet-20-cifar", "textcnn-69", "dssm-2365", "ssd"])
def test_same_seed_gives_identical_state_dicts(name: str) -> None:
    first = build_seeded_module(ZOO[name]).state_dict()
    second = build_seeded_module(ZOO[name]).state_dict()
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_seeds_do_not_depend_on_the_thread_count() -> None:
    entry = ZOO["resnet-20-cifar"]
    one = build_seeded_module(entry).state_dict()
    torch.set_num_threads(2)
    two = build_seeded_module(entry).state_dict()
    assert all(torch.equal(one[key], two[key]) for key in one)


def test_every_float_tensor_is_distinct() -> None:
    """No accidental content-hash sharing inside a model (or all-ones norm scales)."""
    state = build_seeded_module(ZOO["resnet-20-cifar"]).state_dict()
    floats = [t for t in state.values() if t.is_floating_point()]
    digests = {hashlib.sha256(t.numpy().tobytes()).hexdigest() for t in floats}
    assert len(digests) == len(floats)


def test_transfer_variants_share_resnet50s_backbone_bit_for_bit() -> None:
    base = _seeded("resnet-50").state_dict()
    backbone = [k for k in base if not k.startswith("fc.")]
    assert len(backbone) > 300
    heads = [base["fc.weight"]]
    for name in TRANSFER_VARIANTS:
        variant = _seeded(name).state_dict()
        assert variant.keys() == base.keys()
        assert all(torch.equal(variant[k], base[k]) for k in backbone), name
        assert variant["fc.weight"].shape[1] == base["fc.weight"].shape[1]
        assert variant["fc.bias"].shape != base["fc.bias"].shape
        heads.append(variant["fc.weight"])
    rows = [head[:2] for head in heads]  # every head is different, even where shapes match
    assert all(not torch.equal(a, b) for i, a in enumerate(rows) for b in rows[i + 1 :])


def test_head_seeds_apply_by_longest_prefix() -> None:
    entry = ZOO["resnet-50-tl-c"]
    assert entry.provenance.endswith(f"seed={entry.seed} fc.=5003")
    assert entry.seed_for("fc.weight") != entry.seed
    assert entry.seed_for("layer4.2.conv3.weight") == entry.seed == ZOO["resnet-50"].seed


def test_unknown_zoo_name_lists_the_zoo() -> None:
    with pytest.raises(UnknownModel, match="resnet-50"):
        zoo_entry("resnet-51")
