from __future__ import annotations

import copy
import pickle

import pytest

from lizard_core._redact import REDACTED, Secret, redact, register_secret


def test_secret_never_shows_its_value() -> None:
    secret = Secret("liz_redact_value_123456")
    for text in (repr(secret), str(secret), f"{secret}", f"{secret:>30}", repr([secret])):
        assert "liz_redact_value_123456" not in text
    assert secret.reveal() == "liz_redact_value_123456"


def test_secret_equality_hash_copy_and_pickle() -> None:
    secret = Secret("value-one-1234")
    assert secret == Secret("value-one-1234")
    assert secret != Secret("value-two-1234")
    assert secret != "value-one-1234"
    assert hash(secret) == hash(Secret("value-one-1234"))
    assert copy.deepcopy(secret) == secret
    assert pickle.loads(pickle.dumps(secret)).reveal() == "value-one-1234"


def test_secret_requires_a_str() -> None:
    with pytest.raises(TypeError):
        Secret(b"bytes")  # type: ignore[arg-type]


def test_registered_secrets_are_scrubbed_everywhere() -> None:
    register_secret("registered-secret-0001")
    text = "a registered-secret-0001 b registered-secret-0001"
    assert redact(text) == f"a {REDACTED} b {REDACTED}"


def test_the_current_environment_key_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIZARD_API_KEY", "env-key-never-registered")
    assert redact("x env-key-never-registered y") == f"x {REDACTED} y"


def test_extra_values_and_key_shaped_tokens_are_scrubbed() -> None:
    assert redact("token abc-extra-999", "abc-extra-999") == f"token {REDACTED}"
    assert redact("got liz_AbC123_xyz-9 back") == f"got {REDACTED} back"


def test_longest_secret_wins() -> None:
    register_secret("overlap-key")
    register_secret("overlap-key-longer")
    assert redact("overlap-key-longer") == REDACTED


def test_very_short_values_are_not_scrubbed_by_substring() -> None:
    register_secret("ab")
    assert redact("about cabs") == "about cabs"


def test_text_without_secrets_is_unchanged() -> None:
    assert redact("Sandbox not found") == "Sandbox not found"
