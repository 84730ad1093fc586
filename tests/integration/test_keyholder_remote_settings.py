"""dphe.keyholder-ca: the ServerApp verifies the keyholder service's TLS with it."""

from __future__ import annotations

import pytest

from crypto import RemoteKeyholder
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.server_setup import _remote_keyholder

TOKEN = "t" * 40


def test_keyholder_ca_needs_an_https_url():
    with pytest.raises(ConfigError, match="dphe.keyholder-ca='/ca.crt' needs an https"):
        RunSettings.from_config(
            {"dphe.keyholder-ca": "/ca.crt", "dphe.keyholder-url": "http://kh:8765"}
        )
    with pytest.raises(ConfigError, match="dphe.keyholder-ca"):
        RunSettings.from_config({"dphe.keyholder-ca": "/ca.crt"})
    ok = RunSettings.from_config(
        {"dphe.keyholder-ca": "/ca.crt", "dphe.keyholder-url": "https://kh:8765"}
    )
    assert ok.dphe.keyholder_ca == "/ca.crt"


def test_remote_keyholder_uses_the_ca_file(tmp_path):
    from deploy.generate import generate

    creds = generate(tmp_path / "c", dphe=False)
    settings = RunSettings.from_config(
        {
            "dphe.keyholder-url": "https://keyholder:8765",
            "dphe.keyholder-ca": str(creds.serverapp / "ca.crt"),
        }
    )
    keyholder = _remote_keyholder(settings.dphe, TOKEN)
    assert isinstance(keyholder, RemoteKeyholder)
    assert keyholder.url == "https://keyholder:8765"


def test_remote_keyholder_errors_name_the_keys(tmp_path):
    missing = RunSettings.from_config(
        {
            "dphe.keyholder-url": "https://keyholder:8765",
            "dphe.keyholder-ca": str(tmp_path / "nope.crt"),
        }
    )
    with pytest.raises(ConfigError, match="dphe.keyholder-ca=.*does not exist"):
        _remote_keyholder(missing.dphe, TOKEN)
    plain = RunSettings.from_config({"dphe.keyholder-url": "http://keyholder:8765"})
    with pytest.raises(ConfigError, match="dphe.keyholder-url: refusing plain http"):
        _remote_keyholder(plain.dphe, TOKEN)
    # no CA: the system's trust store verifies the certificate
    system = RunSettings.from_config(
        {"dphe.keyholder-url": "https://keyholder.example.org"}
    )
    assert isinstance(_remote_keyholder(system.dphe, TOKEN), RemoteKeyholder)
