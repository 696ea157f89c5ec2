import io, time
from pathlib import Path
import pytest
from agents.sandbox.errors import ExecTimeoutError, InvalidManifestPathError, WorkspaceArchiveReadError
async def test_smoke(session, lizard_counters):
    t=time.monotonic()
    r = await session.exec("printf", "%s|", "a b", "c", shell=False)
    assert r.stdout == b"a b|c|", r
    r = await session.exec("pwd")
    print(r.stdout, r.stderr, r.exit_code)
    await session.write(Path("x/y.txt"), io.BytesIO(b"hello"))
    assert (await session.read(Path("x/y.txt"))).read() == b"hello"
    big = b"z" * (3 * 1024 * 1024)
    await session.write(Path("big.bin"), io.BytesIO(big))
    assert (await session.read(Path("big.bin"))).read() == big
    await session.exec("ln", "-s", "/etc", "out", shell=False)
    with pytest.raises(InvalidManifestPathError):
        await session.read(Path("out/passwd"))
    with pytest.raises(ExecTimeoutError):
        await session.exec("sleep 5", timeout=0.5)
    data = await session.persist_workspace()
    import tarfile
    print(tarfile.open(fileobj=data).getnames())
    print(time.monotonic()-t, lizard_counters.counters()["routes"])
