"""Config loading: defaults, the shipped config.toml, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.config import load_config, parse_config, with_overrides
from infless.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_shipped_config_deploys_the_qa_robot_and_a_vision_function() -> None:
    config = load_config(REPO / "config.toml")
    names = {f.name for f in config.functions}
    assert {"textcnn-69", "lstm-2365", "dssm-2365"} <= names
    assert all(f.slo_ms == 50 for f in config.functions if f.name != "mnist")


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
