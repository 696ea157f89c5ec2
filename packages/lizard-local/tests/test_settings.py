import pytest

from lizard_local.settings import Settings


def test_defaults_follow_the_platform_limits():
    s = Settings()
    assert s.stream_cap_bytes == 512 * 1024
    assert s.line_split_bytes == 64 * 1024
    assert s.default_exec_timeout_ms == 60_000


def test_update_validates_names_and_values():
    s = Settings()
    s.update({"stream_cap_bytes": None, "keepalive_s": 0.5, "line_split_bytes": 1024})
    assert (s.stream_cap_bytes, s.keepalive_s, s.line_split_bytes) == (None, 0.5, 1024)
    for bad in (
        {"nope": 1},
        {"stream_cap_bytes": -1},
        {"keepalive_s": 0},
        {"line_split_bytes": True},
        {"json_output": "raw"},
        {"cap_sse": "yes"},
        {"special_file_reads": "hang"},
    ):
        with pytest.raises(ValueError, match=r"unknown|must"):
            s.update(bad)
    assert s.as_dict()["json_output"] == "lines"
    assert s.as_dict()["special_file_reads"] == "reject"
    s.update({"special_file_reads": "block", "json_output": "verbatim"})
    assert (s.special_file_reads, s.json_output) == ("block", "verbatim")
    s.update({"special_file_reads": "stream"})
    assert s.special_file_reads == "stream"
