"""Which instances share a template: same tenant, package and stored tensors, nothing less."""

from __future__ import annotations

from infless.weights.stored import StoredTensor
from infless.workers.templates import TemplateKey

TENSORS = [
    StoredTensor("conv.weight", "/dev/shm/s/t/aa", "float32", [8, 3, 3, 3]),
    StoredTensor("fc.weight", "/dev/shm/s/t/bb", "float32", [10, 8]),
]


def test_the_same_publication_gets_the_same_key() -> None:
    assert TemplateKey.of("t", "/m/resnet", TENSORS) == TemplateKey.of("t", "/m/resnet", TENSORS)


def test_tenant_package_and_tensors_each_separate_templates() -> None:
    base = TemplateKey.of("t", "/m/resnet", TENSORS)
    other_tenant = TemplateKey.of("u", "/m/resnet", TENSORS)
    other_package = TemplateKey.of("t", "/m/resnet-tl", TENSORS)
    new_head = [TENSORS[0], StoredTensor("fc.weight", "/dev/shm/s/t/cc", "float32", [10, 8])]
    republished = TemplateKey.of("t", "/m/resnet", new_head)
    keys = {base, other_tenant, other_package, republished}
    assert len(keys) == 4
    assert len({k.template_id for k in keys}) == 4


def test_the_template_id_names_tenant_and_model() -> None:
    key = TemplateKey.of("acme", "/srv/models/resnet-50/", TENSORS)
    assert key.template_id.startswith("template-acme-resnet-50-")


def test_the_environment_separates_templates_whatever_its_order() -> None:
    plain = TemplateKey.of("t", "/m/resnet", TENSORS)
    assert TemplateKey.of("t", "/m/resnet", TENSORS, {}) == plain
    env = TemplateKey.of("t", "/m/resnet", TENSORS, {"A": "1", "B": "2"})
    assert env == TemplateKey.of("t", "/m/resnet", TENSORS, {"B": "2", "A": "1"})
    other = TemplateKey.of("t", "/m/resnet", TENSORS, {"A": "1", "B": "3"})
    assert len({plain.template_id, env.template_id, other.template_id}) == 3
    assert env.env == (("A", "1"), ("B", "2"))  # what the template loads its model with


def test_a_file_published_again_is_a_new_template() -> None:
    """A store file deleted or truncated under a template, then published again by a start,
    is a new inode: instances must not fork from the template that maps the old one."""
    before = TemplateKey.of("t", "/m/resnet", TENSORS, files=[(11, 864), (12, 320)])
    same = TemplateKey.of("t", "/m/resnet", TENSORS, files=[(11, 864), (12, 320)])
    again = TemplateKey.of("t", "/m/resnet", TENSORS, files=[(11, 864), (13, 320)])
    assert before == same
    assert again != before
    assert again.template_id != before.template_id
