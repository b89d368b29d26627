"""Config loading: defaults, the shipped config.toml, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.config import load_config, parse_config, with_overrides
from infless.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_config_deploys_the_qa_robot_a_vision_function_and_minilm() -> None:
    config = load_config(REPO / "config.toml")
    slo_ms = {f.name: f.slo_ms for f in config.functions}
    assert {slo_ms[name] for name in ("textcnn-69", "lstm-2365", "dssm-2365")} == {50}
    assert slo_ms["mnist"] == 200
    (minilm,) = [f for f in config.functions if f.name == "minilm"]
    assert minilm.image == "examples/minilm/build/minilm"  # what scripts/serve.sh builds
    assert "examples/minilm/build/minilm" in (REPO / "scripts" / "serve.sh").read_text()


def test_unknown_keys_and_bad_types_are_errors_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="prot"):
        parse_config({"gateway": {"prot": 1}})
    with pytest.raises(ConfigError, match=r"gateway\.port"):
        parse_config({"gateway": {"port": "eighty"}})
    with pytest.raises(ConfigError, match="unique"):
        parse_config({"functions": [{"name": "a", "image": "m"}, {"name": "a", "image": "m"}]})


def test_overrides_replace_single_keys(tmp_path: Path) -> None:
    config = with_overrides(load_config(None), gateway={"port": 0}, state={"dir": str(tmp_path)})
    assert config.gateway.port == 0
    assert config.state_dir == tmp_path
    assert config.gateway.host == "127.0.0.1"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
