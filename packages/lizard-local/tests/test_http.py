import pytest

from lizard_local.http import ApiError, Request, json_response


def request(body: bytes) -> Request:
    return Request("POST", "/x", {}, {}, body)


def test_json_body_errors_are_400():
    assert request(b"").json(required=False) == {}
    for body in (b"", b"{", b"[1]", b"\xff"):
        with pytest.raises(ApiError) as caught:
            request(body).json()
        assert caught.value.status == 400


def test_error_body_shape():
    err = ApiError(429, "slow down", "RATE_LIMITED", retryAfterS=3)
    assert err.body() == {"error": "slow down", "code": "RATE_LIMITED", "retryAfterS": 3}
    assert ApiError(404, "gone").body() == {"error": "gone"}


def test_query_parsing_and_json_response():
    assert Request.parse_query(b"path=%2Ftmp%2Fa%20b&user=") == {"path": "/tmp/a b", "user": ""}
    res = json_response({"a": 1}, 201, {"X-T": "1"})
    assert res.status == 201
    assert (b"content-length", b"8") in res.raw_headers()
    assert (b"x-t", b"1") in res.raw_headers()
