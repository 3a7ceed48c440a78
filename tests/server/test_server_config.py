"""Server settings: loopback by default, a key for anything else, values checked."""

from __future__ import annotations

import pytest

from app.core.errors import SettingsError
from app.core.presets.presets import get_preset
from app.server.config import ServerConfig, is_loopback


@pytest.fixture
def preset():
    return get_preset("chat")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("myhost.example", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


def test_the_default_is_loopback_without_a_key(preset):
    config = ServerConfig(preset=preset)
    assert config.host == "127.0.0.1" and config.loopback and config.api_key is None
    assert config.cors_origins == ()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "myhost.example"])
def test_any_other_host_is_refused_without_a_key(preset, host):
    with pytest.raises(SettingsError, match="without an API key.*--api-key"):
        ServerConfig(preset=preset, host=host)
    assert ServerConfig(preset=preset, host=host, api_key="s3cret").api_key == "s3cret"


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"port": 70000}, "between 0 and 65535"),
        ({"port": "80"}, "whole number"),
        ({"api_key": "has space"}, "no spaces"),
        ({"api_key": " "}, "non-empty"),
        ({"cors_origins": ("example.com",)}, "http://"),
        ({"max_body_bytes": 0}, "max_body_bytes"),
        ({"max_pending": 0}, "max_pending"),
        ({"host": ""}, "host"),
    ],
)
def test_bad_values_are_refused_by_name(preset, changes, words):
    with pytest.raises(SettingsError, match=words):
        ServerConfig(preset=preset, **changes)
