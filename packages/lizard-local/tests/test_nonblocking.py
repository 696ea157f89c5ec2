import os

from lizard_local.nonblocking import read_ready


def test_an_empty_pipe_gives_none_then_data_then_end_of_file():
    r, w = os.pipe()
    try:
        os.set_blocking(r, False)
        assert read_ready(r, 4096) is None
        os.write(w, b"abc")
        assert read_ready(r, 2) == b"ab"
        assert read_ready(r, 4096) == b"c"
        os.close(w)
        w = -1
        assert read_ready(r, 4096) == b""
    finally:
        os.close(r)
        if w != -1:
            os.close(w)


def test_a_read_error_counts_as_end_of_file(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert read_ready(fd, 4096) == b""  # EISDIR
    finally:
        os.close(fd)
