"""Model families to transform between (Optimus §8): ResNets and VGGs of every depth, BERTs of
four sizes, and two task heads on one BERT encoder; the pairs `bench.transform` measures.
resnet-50, the Table 1 entry, is the ResNet family's fifth member.

Torch-free, no I/O (part of the zoo's registry, see `infless.models.zoo`).
"""

from __future__ import annotations

from infless.models.zoo.entry import ZooEntry, image, probabilities, sig

_BERT_SIZES: tuple[tuple[str, int, int, int, int], ...] = (
    # (size, layers, hidden, heads, seed): the intermediate width is 4 × hidden
    ("mini", 4, 256, 4, 1121),
    ("small", 4, 512, 8, 1122),
    ("medium", 8, 512, 8, 1123),
    ("base", 12, 768, 12, 1124),
)
_BERT_TOKENS = 64


def _bert_entry(size: str, layers: int, hidden: int, heads: int, seed: int, qa: bool) -> ZooEntry:
    tokens = (
        sig("input_ids", "int64", _BERT_TOKENS),
        sig("attention_mask", "int64", _BERT_TOKENS),
    )
    kwargs: dict[str, object] = {
        "vocab_size": 30522,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "intermediate": 4 * hidden,
        "max_positions": 512,
        "type_vocab_size": 2,
        "classes": 2,
    }
    if qa:
        return ZooEntry(
            name=f"bert-{size}-qa",
            builder="bert",
            kwargs={**kwargs, "head": "qa"},
            inputs=tokens,
            outputs=(sig("span_logits", "float32", _BERT_TOKENS, 2),),
            seed=seed,
            head_seeds={"qa_outputs.": seed + 100},
            description=f"bert-{size}'s encoder, bit for bit, with a question-answering head: "
            "per token, the logits of a span starting and ending there",
        )
    return ZooEntry(
        name=f"bert-{size}",
        builder="bert",
        kwargs=kwargs,
        inputs=tokens,
        outputs=probabilities(2),
        seed=seed,
        postprocess="softmax",
        description=f"BERT-{size} ({layers} layers, hidden {hidden}, {heads} heads, vocabulary "
        f"30522) sentence classifier over {_BERT_TOKENS} tokens",
    )


FAMILY_ENTRIES: list[ZooEntry] = [
    *(
        ZooEntry(
            name=f"resnet-{depth}",
            builder="resnet",
            kwargs={"depth": depth, "num_classes": 1000},
            inputs=image(3, 224),
            outputs=probabilities(1000),
            seed=seed,
            postprocess="softmax",
            description=f"ResNet-{depth} ImageNet classifier on 224×224 RGB",
        )
        for depth, seed in ((18, 1101), (34, 1102), (101, 1103), (152, 1104))
    ),
    *(
        ZooEntry(
            name=f"vgg-{depth}",
            builder="vgg",
            kwargs={"depth": depth, "num_classes": 1000, "hidden": 2048},
            inputs=image(3, 128),
            outputs=probabilities(1000),
            seed=seed,
            postprocess="softmax",
            description=f"VGG-{depth} convolutional features with a global-pool 2048-wide "
            "classifier head, on 128×128 RGB",
        )
        for depth, seed in ((11, 1111), (13, 1112), (16, 1113), (19, 1114))
    ),
    *(_bert_entry(*size, qa=False) for size in _BERT_SIZES),
    _bert_entry(*_BERT_SIZES[-1], qa=True),
]

# name -> family, for the transformation benchmark and tests
FAMILIES: dict[str, tuple[str, ...]] = {
    "resnet": ("resnet-18", "resnet-34", "resnet-50", "resnet-101", "resnet-152"),
    "vgg": ("vgg-11", "vgg-13", "vgg-16", "vgg-19"),
    "bert": ("bert-mini", "bert-small", "bert-medium", "bert-base", "bert-base-qa"),
}

# (source, destination) pairs of `bench.transform`: within each family both ways, across
# families both ways, and the two heads on one BERT.
TRANSFORM_PAIRS: tuple[tuple[str, str], ...] = (
    ("resnet-18", "resnet-34"),
    ("resnet-34", "resnet-18"),
    ("resnet-34", "resnet-50"),
    ("resnet-50", "resnet-34"),
    ("resnet-50", "resnet-101"),
    ("resnet-101", "resnet-50"),
    ("resnet-101", "resnet-152"),
    ("resnet-152", "resnet-101"),
    ("vgg-11", "vgg-16"),
    ("vgg-16", "vgg-11"),
    ("vgg-13", "vgg-19"),
    ("vgg-19", "vgg-13"),
    ("bert-mini", "bert-small"),
    ("bert-small", "bert-mini"),
    ("bert-medium", "bert-base"),
    ("bert-base", "bert-medium"),
    ("bert-mini", "bert-base"),
    ("bert-base", "bert-mini"),
    ("bert-base", "bert-base-qa"),
    ("bert-base-qa", "bert-base"),
    ("resnet-152", "vgg-19"),
    ("vgg-19", "resnet-152"),
    ("resnet-50", "vgg-16"),
    ("vgg-16", "resnet-50"),
    ("resnet-50", "bert-base"),
    ("bert-base", "resnet-50"),
)
