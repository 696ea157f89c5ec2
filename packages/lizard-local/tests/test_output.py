from hypothesis import given
from hypothesis import strategies as st

from lizard_local.output import LineSplitter


def split_all(chunks: list[bytes], split: int | None = 65536, cap: int | None = None) -> list[str]:
    s = LineSplitter(split, cap)
    out: list[str] = []
    for c in chunks:
        out += s.feed(c)
    return out + s.finish()


def test_empty_lines_and_unterminated_last_line():
    assert split_all([b"a\n\nb\ntail"]) == ["a", "", "b", "tail"]


def test_no_empty_line_after_trailing_newline():
    assert split_all([b"a\n"]) == ["a"]
    assert split_all([b"\n"]) == [""]
    assert split_all([b""]) == []


def test_crlf_is_a_terminator_but_lone_cr_is_kept():
    assert split_all([b"a\r\nb\r", b"\nc\rd"]) == ["a", "b", "c\rd"]


def test_lines_split_across_chunks():
    assert split_all([b"ab", b"c\nd", b"e"]) == ["abc", "de"]


def test_long_lines_are_cut_into_pieces():
    line = b"x" * 150_000
    assert split_all([line + b"\nend"]) == ["x" * 65536, "x" * 65536, "x" * 18928, "end"]
    # The same whatever the chunking.
    chunks = [line[i : i + 7000] for i in range(0, len(line), 7000)] + [b"\nend"]
    assert split_all(chunks) == ["x" * 65536, "x" * 65536, "x" * 18928, "end"]


def test_cut_never_breaks_a_utf8_character():
    line = ("é" * 40_000).encode()  # 2 bytes each
    pieces = split_all([line])
    assert "".join(pieces) == "é" * 40_000
    assert all(len(p.encode()) <= 65536 for p in pieces)


def test_piece_ending_in_cr_waits_for_its_newline():
    body = b"y" * 65536 + b"\r"
    assert split_all([body, b"\n"]) == ["y" * 65536]


def test_cap_truncates_and_flags():
    s = LineSplitter(None, 5)
    assert s.feed(b"abc\ndefgh\n") == ["abc"]
    assert s.truncated
    assert s.finish() == ["d"]


def test_invalid_utf8_is_replaced():
    assert split_all([b"\xff\xfeok\n"]) == ["\ufffd\ufffdok"]


@given(
    st.text(st.characters(blacklist_characters="\r", blacklist_categories=["Cs"]), max_size=300),
    st.lists(st.integers(min_value=1, max_value=40), max_size=30),
)
def test_lines_rejoin_to_the_input_whatever_the_chunking(text: str, cuts: list[int]):
    data = text.encode()
    chunks, pos = [], 0
    for n in cuts:
        chunks.append(data[pos : pos + n])
        pos += n
    chunks.append(data[pos:])
    assert "\n".join(split_all(chunks, split=None)) == text.removesuffix("\n")


@given(
    st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=300),
    st.integers(min_value=4, max_value=32),
)
def test_long_line_pieces_fit_and_rejoin(line: str, split: int):
    pieces = split_all([line.encode()], split=split)
    assert "".join(pieces) == line
    assert all(len(p.encode()) <= split for p in pieces)
