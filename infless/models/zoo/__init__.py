"""The model zoo registry: every zoo model's architecture, signature, seeds and provenance.

Torch-free (the gateway and `infless models list` read it): builders are named here and
live in the family modules (`cnn`, `mobile`, `text`, `bert`, `audio`), imported lazily by
`infless.models.loader`. The transformation families (ResNets, VGGs, BERTs) are listed in
`families`, `ZooEntry` in `entry`. Weights are not described here but derived from the seeds by
`infless.models.zoo.seeding`. Must not import torch or do I/O.

Sizes: `table_size_mib` is INFless Table 1's "Network Size" (its "M" is MiB: ResNet-50's
25.6 M fp32 parameters are 97.5 MiB, listed as 98M); `table_gflops` its compute column.
"""

from __future__ import annotations

from infless.errors import UnknownModel
from infless.models.zoo.entry import WEIGHTS_VERSION, ZooEntry, image, probabilities, sig
from infless.models.zoo.families import FAMILIES, FAMILY_ENTRIES, TRANSFORM_PAIRS

__all__ = [
    "BUILDERS",
    "FAMILIES",
    "TABLE1_MODELS",
    "TRANSFORM_PAIRS",
    "WEIGHTS_VERSION",
    "ZOO",
    "ZooEntry",
    "zoo_entry",
]

# builder name (a manifest's `architecture`) -> "module:callable"
BUILDERS: dict[str, str] = {
    "mnist_cnn": "infless.models.zoo.cnn:mnist_cnn",
    "vgg16": "infless.models.zoo.cnn:vgg16",
    "resnet50": "infless.models.zoo.cnn:resnet50",
    "resnet": "infless.models.zoo.cnn:resnet",
    "vgg": "infless.models.zoo.cnn:vgg",
    "resnet_cifar": "infless.models.zoo.cnn:resnet_cifar",
    "mobilenet_v1": "infless.models.zoo.mobile:mobilenet_v1",
    "ssd_mobilenet_v1": "infless.models.zoo.mobile:ssd_mobilenet_v1",
    "textcnn": "infless.models.zoo.text:textcnn",
    "lstm_classifier": "infless.models.zoo.text:lstm_classifier",
    "dssm": "infless.models.zoo.text:dssm",
    "bert": "infless.models.zoo.bert:bert",
    "yamnet": "infless.models.zoo.audio:yamnet",
}

# Transfer-learning variants of resnet-50 (Tetris §2: vehicle classification at 58.com):
# (suffix, classes, head seed, task).
_RESNET50_SEED = 5000
_TRANSFER_HEADS: tuple[tuple[str, int, int, str], ...] = (
    ("a", 196, 5001, "car make and model (196 classes, Stanford-Cars style)"),
    ("b", 12, 5002, "vehicle body type (12 classes)"),
    ("c", 2, 5003, "car vs motorcycle (2 classes, Tetris's SVT application)"),
    ("d", 64, 5004, "vehicle brand (64 classes)"),
)

_ENTRIES: list[ZooEntry] = [
    ZooEntry(
        name="bert-v1",
        builder="bert",
        kwargs={
            "vocab_size": 21128,
            "hidden": 768,
            "layers": 12,
            "heads": 12,
            "intermediate": 3072,
            "max_positions": 512,
            "type_vocab_size": 2,
            "classes": 2,
        },
        inputs=(sig("input_ids", "int64", 64), sig("attention_mask", "int64", 64)),
        outputs=probabilities(2),
        seed=1001,
        postprocess="softmax",
        description="BERT-base (12 layers, hidden 768, vocabulary 21128) sentence classifier; "
        "sequences of 64 tokens (Table 1's 22.2 GFLOPs is for 128: 64 keeps batch 32 "
        "affordable on CPU); attention_mask is 1 for real tokens, 0 for padding",
        table_size_mib=391,
        table_gflops=22.2,
    ),
    ZooEntry(
        name="resnet-50",
        builder="resnet50",
        kwargs={"num_classes": 1000},
        inputs=image(3, 224),
        outputs=probabilities(1000),
        seed=_RESNET50_SEED,
        postprocess="softmax",
        description="ResNet-50 v1.5 ImageNet classifier on 224×224 RGB",
        table_size_mib=98,
        table_gflops=3.89,
    ),
    ZooEntry(
        name="vggnet",
        builder="vgg16",
        kwargs={"num_classes": 1000, "hidden": 2048},
        inputs=image(3, 128),
        outputs=probabilities(1000),
        seed=1003,
        postprocess="softmax",
        description="VGG-16 convolutional features with a global-pool 2048-wide classifier "
        "head, on 128×128 RGB",
        table_size_mib=69,
        table_gflops=5.55,
    ),
    ZooEntry(
        name="lstm-2365",
        builder="lstm_classifier",
        kwargs={
            "vocab_size": 20000,
            "embed_dim": 256,
            "hidden": 512,
            "layers": 2,
            "classes": 2365,
        },
        inputs=(sig("token_ids", "int64", 32),),
        outputs=probabilities(2365),
        seed=1004,
        postprocess="softmax",
        description="Q&A answer classifier: 2-layer LSTM (hidden 512) over 32 tokens "
        "(vocabulary 20000) → 2365 answers",
        table_size_mib=39,
        table_gflops=0.10,
    ),
    ZooEntry(
        name="resnet-20",
        builder="resnet_cifar",
        kwargs={"depth": 20, "width": 6, "num_classes": 10},
        inputs=image(3, 32),
        outputs=probabilities(10),
        seed=1005,
        postprocess="softmax",
        description="ResNet-20 widened 6× (channels 96/192/384) on 32×32 CIFAR images",
        table_size_mib=36,
        table_gflops=1.55,
    ),
    ZooEntry(
        name="ssd",
        builder="ssd_mobilenet_v1",
        kwargs={"num_classes": 91, "image_size": 300, "detections": 100},
        inputs=image(3, 300),
        outputs=(
            sig("boxes", "float32", 100, 4),
            sig("scores", "float32", 100),
            sig("labels", "int64", 100),
        ),
        seed=1006,
        description="SSD-MobileNet-v1 object detector on 300×300 RGB, 91 COCO classes; the "
        "100 best of 1917 anchors as xyxy boxes in [0, 1] (no NMS)",
        table_size_mib=29,
        table_gflops=2.02,
    ),
    ZooEntry(
        name="dssm-2365",
        builder="dssm",
        kwargs={"vocab_size": 10000, "embed_dim": 256, "conv_dim": 512, "out_dim": 128},
        inputs=(sig("query_ids", "int64", 32), sig("doc_ids", "int64", 64)),
        outputs=(sig("similarity", "float32", 1),),
        seed=1007,
        description="Q&A matcher: two CLSM towers (vocabulary 10000) over a 32-token query "
        "and a 64-token answer → cosine similarity",
        table_size_mib=25,
        table_gflops=0.13,
    ),
    ZooEntry(
        name="yamnet",
        builder="yamnet",
        kwargs={"num_classes": 521},
        inputs=(sig("log_mel", "float32", 1, 960, 64),),
        outputs=(sig("scores", "float32", 521),),
        seed=1008,
        postprocess="sigmoid",
        description="YAMNet (MobileNet-v1) over a 9.6 s log-mel spectrogram (960 frames × "
        "64 mel bands) → 521 AudioSet class scores",
        table_size_mib=17,
        table_gflops=1.60,
    ),
    ZooEntry(
        name="mobilenet",
        builder="mobilenet_v1",
        kwargs={"num_classes": 1000, "in_channels": 3},
        inputs=image(3, 64),
        outputs=probabilities(1000),
        seed=1009,
        postprocess="softmax",
        description="MobileNet-v1 (width 1.0) on 64×64 RGB (small input, to match Table 1's "
        "0.05 GFLOPs)",
        table_size_mib=17,
        table_gflops=0.05,
    ),
    ZooEntry(
        name="textcnn-69",
        builder="textcnn",
        kwargs={
            "vocab_size": 12000,
            "embed_dim": 128,
            "kernel_sizes": [3, 4, 5],
            "filters": 768,
            "classes": 20,
        },
        inputs=(sig("token_ids", "int64", 69),),
        outputs=probabilities(20),
        seed=1010,
        postprocess="softmax",
        description="TextCNN (kernels 3/4/5 × 768 filters, vocabulary 12000) over 69 tokens "
        "→ 20 classes",
        table_size_mib=11,
        table_gflops=0.53,
    ),
    ZooEntry(
        name="textcnn-64",
        builder="textcnn",
        kwargs={
            "vocab_size": 5000,
            "embed_dim": 128,
            "kernel_sizes": [3, 4, 5],
            "filters": 100,
            "classes": 2,
        },
        inputs=(sig("token_ids", "int64", 64),),
        outputs=probabilities(2),
        seed=1013,
        postprocess="softmax",
        description="the classic small TextCNN (kernels 3/4/5 × 100 filters, vocabulary 5000, "
        "128-d embeddings) over 64 tokens → 2 classes; a small benchmark model, not in Table 1",
    ),
    ZooEntry(
        name="mnist",
        builder="mnist_cnn",
        kwargs={"num_classes": 10, "hidden": 56},
        inputs=image(1, 28),
        outputs=probabilities(10),
        seed=1011,
        postprocess="softmax",
        description="two-conv LeNet-style digit classifier on 28×28 grey images",
        table_size_mib=72 / 1024,
        table_gflops=0.01,
    ),
    ZooEntry(
        name="resnet-20-cifar",
        builder="resnet_cifar",
        kwargs={"depth": 20, "width": 1, "num_classes": 10},
        inputs=image(3, 32),
        outputs=probabilities(10),
        seed=1012,
        postprocess="softmax",
        description="the standard ResNet-20 for CIFAR-10 (channels 16/32/64, ~0.27 M "
        "parameters); a small benchmark model, not in Table 1",
    ),
    *(
        ZooEntry(
            name=f"resnet-50-tl-{suffix}",
            builder="resnet50",
            kwargs={"num_classes": classes},
            inputs=image(3, 224),
            outputs=probabilities(classes),
            seed=_RESNET50_SEED,
            head_seeds={"fc.": head_seed},
            postprocess="softmax",
            description=f"resnet-50 transfer-learning variant: {task}; the backbone is "
            "resnet-50's, bit for bit, only the `fc` head differs",
        )
        for suffix, classes, head_seed, task in _TRANSFER_HEADS
    ),
]

ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in (*_ENTRIES, *FAMILY_ENTRIES)}

# The eleven models of INFless Table 1, in the table's order.
TABLE1_MODELS: tuple[str, ...] = tuple(e.name for e in _ENTRIES if e.table_size_mib is not None)


def zoo_entry(name: str) -> ZooEntry:
    """The zoo entry called `name`, or `UnknownModel` listing the known names."""
    try:
        return ZOO[name]
    except KeyError:
        raise UnknownModel(
            f"unknown zoo model {name!r}; the zoo has: {', '.join(sorted(ZOO))}"
        ) from None
