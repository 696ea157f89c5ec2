"""``lizard_core._chunks``: pieces of any sizes re-cut into upload chunks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lizard_core._chunks import check_data, rechunk

PIECE = st.one_of(
    st.binary(max_size=40),
    st.binary(max_size=40).map(bytearray),
    st.binary(max_size=40).map(memoryview),
)


@given(pieces=st.lists(PIECE, max_size=12), size=st.integers(min_value=1, max_value=16))
def test_rechunk_keeps_every_byte_in_full_chunks_but_the_last(
    pieces: list[bytes], size: int
) -> None:
    chunks = list(rechunk(pieces, size))
    assert b"".join(chunks) == b"".join(bytes(piece) for piece in pieces)
    assert all(type(chunk) is bytes for chunk in chunks)
    assert all(len(chunk) == size for chunk in chunks[:-1])
    assert all(0 < len(chunk) <= size for chunk in chunks[-1:])


def test_a_piece_already_a_chunk_is_passed_on_uncopied() -> None:
    chunk = b"x" * 8
    assert next(rechunk([chunk], 8)) is chunk


def test_anything_but_bytes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="data must be bytes, not str"):
        list(rechunk([b"ok", "text"], 4))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not int"):
        check_data(5)
