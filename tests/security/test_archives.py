"""Item 2: archives are read, never trusted.

Real tarballs on the loopback moto S3 and real git repositories, launched on both backends: every escape an
attacker has (``../``, an absolute path, a link and then a file through it, a hard link, the long-path link
trick that defeats ``extractall(filter="data")`` on Python < 3.11.13, CVE-2025-4517) is refused with one
sentence and nothing lands outside the code cache; a gzip bomb stops while it is read; TRAINBOT_CODE_MAX_BYTES
holds for tarballs and for ``git archive`` output, which is streamed to disk, not held in memory. A property
test feeds the reader generated tar files and checks that nothing ever lands outside its target.
"""

from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.backends.archives import ArchiveLimits, ArchiveRefused, unpack
from jobs.backends.code_sources import GitCodeSources, S3Tarballs
from jobs.backends.local.container import unpack_sourcedir
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import SpecError
from jobs.planning.plan import build_plan
from jobs.planning.reader import CommandReader
from tests.support.environment import outside_env
from tests.support.git_repos import make_repo
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401

TRAINBOT = Path(sys.executable).with_name("trainbot")
PAYLOAD = b"pwned\n"


# ---------------------------------------------------------------- the attacks, as tar files


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", data: bytes = b"") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def tar_of(members: list[tuple[tarfile.TarInfo, bytes]], *, compress: bool = True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w", format=tarfile.PAX_FORMAT) as archive:
        for info, data in [_info("train.py", data=b"print('training')\n"), *members]:
            archive.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def cve_2025_4517(target: str) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Links through folders whose names fill PATH_MAX: os.path.realpath gives up part-way, so tarfile's
    "data" filter believes ``escape`` stays inside while it points at ``target`` (relative to the tar's root)."""
    long_name, steps, members, path = "d" * 247, "abcdefghijklmnop", [], ""
    for step in steps:
        members.append(_info(os.path.join(path, long_name), tarfile.DIRTYPE))
        members.append(_info(os.path.join(path, step), tarfile.SYMTYPE, link=long_name))
        path = os.path.join(path, long_name)
    link_path = os.path.join(*steps, "l" * 254)
    members.append(_info(link_path, tarfile.SYMTYPE, link="../" * len(steps)))
    members.append(_info("escape", tarfile.SYMTYPE, link=f"{link_path}/{target}"))
    members.append(_info("escape/pwned", data=PAYLOAD))
    return members


ATTACKS: dict[str, tuple[Callable[[Path], list[tuple[tarfile.TarInfo, bytes]]], str]] = {
    "dot-dot": (lambda outside: [_info("../../outside/pwned", data=PAYLOAD)], "climbs out of its folder (..)"),
    "absolute": (lambda outside: [_info(str(outside / "pwned"), data=PAYLOAD)], "which is absolute"),
    "link-then-file": (lambda outside: [_info("out", tarfile.SYMTYPE, link=str(outside)),
                                        _info("out/pwned", data=PAYLOAD)], "holds a symbolic link 'out'"),
    "link-inside": (lambda outside: [_info("here", tarfile.SYMTYPE, link=".")], "holds a symbolic link 'here'"),
    "hard-link": (lambda outside: [_info("hard", tarfile.LNKTYPE, link=str(outside / "victim"))],
                  "holds a hard link 'hard'"),
    "device": (lambda outside: [_info("dev", tarfile.CHRTYPE)], "device, FIFO or special file"),
    "cve-2025-4517": (lambda outside: cve_2025_4517("../outside"), "holds a symbolic link"),
}


def landed_outside(root: Path) -> list[Path]:
    """Every file the attacks name ``pwned`` anywhere under ``root``: a refused archive leaves none at all."""
    return [p for p in root.rglob("pwned") if p.is_file()]


# ---------------------------------------------------------------- on S3, both backends


@pytest.fixture
def bucket(moto_aws: MotoAws) -> MotoAws:  # noqa: F811
    return moto_aws


def put(aws: MotoAws, key: str, body: bytes) -> str:
    aws.client("s3").put_object(Bucket=aws.bucket, Key=key, Body=body)
    return f"s3://{aws.bucket}/{key}"


def own_code_plan(uri: str, aws: MotoAws, *, preset: str = "distilbert-spot") -> object:
    reader = CommandReader.of(max_instances=16, code_sources=(f"s3://{aws.bucket}/",))
    # checkpoint_minutes=: the bot's spot entry goes beside the team's code, so the tarball is unpacked here first
    # (spot alone passes an s3:// tarball on to SageMaker as it is, as the team's own HuggingFace(...) call would).
    spec = reader.read(f"{preset} code={uri} entry=train.py checkpoint_minutes=5")
    return build_plan(spec, bucket=aws.bucket, lineage_id="own")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_escaping_tarball_is_refused_on_the_local_backend(attack: str, bucket: MotoAws, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("the bot's file\n")
    build, sentence = ATTACKS[attack]
    uri = put(bucket, f"code/{attack}.tar.gz", tar_of(build(outside)))
    backend = LocalBackend(tmp_path / "home", clock=SystemClock(), offline=True)

    with pytest.raises(SpecError) as refused:
        backend.launch("own-1", own_code_plan(uri, bucket))  # type: ignore[arg-type]

    message = refused.value.user_message()
    assert sentence in message and message.startswith(f"The code tarball {uri} ") and message.count("\n") == 0
    assert landed_outside(tmp_path) == []
    assert (outside / "victim").read_text() == "the bot's file\n"
    assert not (tmp_path / "home" / "local-jobs" / "own-1").exists()  # no half of a job stays


@pytest.mark.parametrize("attack", ["cve-2025-4517", "link-then-file", "dot-dot"])
def test_an_escaping_tarball_is_refused_on_sagemaker_before_anything_is_created(
    attack: str, bucket: MotoAws, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    build, sentence = ATTACKS[attack]
    uri = put(bucket, f"code/{attack}.tar.gz", tar_of(build(outside)))
    creates = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(bucket, bucket.boto_session(recorders=[creates]), code_home=tmp_path / "home")

    with pytest.raises(SpecError, match="The code tarball"):  # unpacked here first: the spot entry goes beside it
        backend.launch("own-1", own_code_plan(uri, bucket))

    assert landed_outside(tmp_path) == [] and creates.calls == []


def bomb(unpacked: int) -> bytes:
    """A .tar.gz of one file of ``unpacked`` zero bytes, about a thousandth of that in size (gzip members)."""
    header = tarfile.TarInfo("zeros.bin")
    header.size = unpacked
    block = gzip.compress(bytes(1 << 20), 9)
    return gzip.compress(header.tobuf(format=tarfile.PAX_FORMAT)) + block * (unpacked >> 20)


def test_a_gzip_bomb_stops_while_it_is_read(bucket: MotoAws, tmp_path: Path) -> None:
    uri = put(bucket, "code/bomb.tar.gz", bomb(400_000_000))  # 400 MB of zeros in 0.4 MB, under the size cap
    tarballs = S3Tarballs(tmp_path / "home", lambda: bucket.client("s3"))

    with pytest.raises(SpecError, match=r"inflates more than 100 times \(a compression bomb"):
        tarballs.fetch(uri)

    written = sum(p.stat().st_size for p in (tmp_path / "home").rglob("*") if p.is_file())
    assert written == 0  # what it had unpacked went with the refused tree


def test_the_size_cap_holds_for_tarballs_and_counts_what_arrives(bucket: MotoAws, tmp_path: Path) -> None:
    rng = random.Random(7)
    text = bytes(rng.choice(b"acgt") for _ in range(4_000_000))  # packs ~4:1, no bomb
    uri = put(bucket, "code/big.tar.gz", tar_of([_info("genome.txt", data=text)]))
    s3 = bucket.client("s3")
    tarballs = S3Tarballs(tmp_path / "home", lambda: s3, limits=ArchiveLimits(max_bytes=2_000_000))

    with pytest.raises(SpecError, match=r"big.tar.gz unpacks to more than 2 MB\.$"):
        tarballs.fetch(uri)  # 1.2 MB fetched, refused while unpacking: the cap counts what arrives
    with pytest.raises(SpecError, match=r"is 1 MB, more than the 900,000 bytes own code may unpack to"):
        S3Tarballs(tmp_path / "home", lambda: s3, limits=ArchiveLimits(max_bytes=900_000)).fetch(uri)  # never fetched


def test_too_many_members_are_refused(bucket: MotoAws, tmp_path: Path) -> None:
    uri = put(bucket, "code/many.tar.gz", tar_of([_info(f"f{i}.py", data=b"x") for i in range(200)]))
    tarballs = S3Tarballs(tmp_path / "home", lambda: bucket.client("s3"), limits=ArchiveLimits(max_members=100))

    with pytest.raises(SpecError, match="holds more than 100 files"):
        tarballs.fetch(uri)


# ---------------------------------------------------------------- git archive


def test_a_repository_with_links_is_refused_at_checkout(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    (repo.work / "secrets").symlink_to("/etc")
    commit = repo.commit({"train.py": "print(1)\n"})
    git = GitCodeSources(tmp_path / "home")

    with pytest.raises(SpecError, match=r"holds a symbolic link 'secrets' -> '/etc'; own code may hold only regular"):
        git.checkout(repo.url, commit)
    assert not list((tmp_path / "home" / "code" / "git").glob("*/*.complete"))


CHECKOUT = """
import resource, sys
from pathlib import Path
from jobs.backends.archives import ArchiveLimits
from jobs.backends.code_sources import GitCodeSources
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
limits = ArchiveLimits(max_bytes=int(sys.argv[3]))
try:
    tree = GitCodeSources(Path(sys.argv[4]), limits=limits).checkout(sys.argv[1], sys.argv[2])
    outcome = "checked out %d bytes" % (tree / "zeros.bin").stat().st_size
except Exception as exc:
    outcome = "refused: %s" % exc
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(outcome)
print((after - before) // 1024)
"""


@pytest.fixture(scope="module")
def zeros_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A repository of a few hundred KB holding 200 MB of zeros (git compresses them away)."""
    repo = make_repo(tmp_path_factory.mktemp("zeros") / "git", "zeros")
    with (repo.work / "zeros.bin").open("wb") as out:
        out.truncate(200_000_000)
    commit = repo.commit({"train.py": "print(1)\n"})
    (repo.work / "zeros.bin").unlink()
    return repo.url, commit


def checkout_in_a_process(url: str, commit: str, max_bytes: int, home: Path) -> tuple[str, int]:
    """``checkout`` in a fresh Python, as the bot runs it: (outcome, MiB its peak memory grew by)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", CHECKOUT, url, commit, str(max_bytes), str(home)], cwd=root,
                          capture_output=True, text=True, timeout=240, check=True)
    outcome, grown = done.stdout.strip().splitlines()[-2:]
    return outcome, int(grown)


def test_git_archive_is_streamed_to_disk_not_held_in_memory(zeros_repo: tuple[str, str], tmp_path: Path) -> None:
    outcome, grown_mib = checkout_in_a_process(*zeros_repo, 500_000_000, tmp_path / "home")
    assert outcome == "checked out 200000000 bytes"
    assert grown_mib < 64, f"the checkout of 200 MB grew the process by {grown_mib} MiB"


def test_the_size_cap_holds_for_git_archive_output(zeros_repo: tuple[str, str], tmp_path: Path) -> None:
    outcome, grown_mib = checkout_in_a_process(*zeros_repo, 50_000_000, tmp_path / "home")
    assert outcome.startswith("refused: The code at ") and outcome.endswith("unpacks to more than 50 MB.")
    assert grown_mib < 64
    assert not list((tmp_path / "home").rglob("zeros.bin"))


def test_trainbot_code_max_bytes_refuses_a_launch_with_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"jobs/train.py": "print(1)\n", "jobs/data.txt": os.urandom(400_000).hex()})
    env = outside_env()
    env.update(TRAINBOT_HOME=str(tmp_path / "home"), TRAINBOT_BACKEND="local", TRAINBOT_CODE_MAX_BYTES="500KB",
               TRAINBOT_CODE_SOURCES=f"file://{tmp_path / 'git'}/")
    done = subprocess.run([str(TRAINBOT), "launch", "distilbert-spot", f"code=git+{repo.url}@{commit}",
                           "entry=jobs/train.py"], env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "unpacks to more than 500,000 bytes" in line


# ---------------------------------------------------------------- the direct runner's unpack


def test_the_direct_runners_unpack_checks_every_member(tmp_path: Path) -> None:
    archive = tmp_path / "sourcedir.tar.gz"
    archive.write_bytes(tar_of(cve_2025_4517("../outside")))
    (tmp_path / "outside").mkdir()

    with pytest.raises(ArchiveRefused, match="The job's sourcedir.tar.gz holds a symbolic link"):
        unpack_sourcedir(archive, tmp_path / "job" / "code")
    assert landed_outside(tmp_path) == []


# ---------------------------------------------------------------- any tar at all


_NAMES = st.lists(st.sampled_from(["a", "b", "..", ".", "", "c" * 300, "/", "d" * 255, "é", "x/../../y"]),
                  min_size=1, max_size=6).map("/".join)
_KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE,
                          tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE])
_LINKS = st.sampled_from(["", ".", "..", "/etc/passwd", "../outside", "a", "a/b", "../" * 20 + "tmp"])
_MEMBER = st.tuples(_NAMES, _KINDS, _LINKS, st.binary(max_size=64), st.sampled_from([None, 0, 1 << 40, 10**12]))


def _raw_tar(members: list[tuple[str, bytes, str, bytes, int | None]], *, gz: bool) -> bytes:
    """A tar written member by member, lies included: a declared size need not match the data that follows."""
    out = io.BytesIO()
    for name, kind, link, data, declared in members:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, link
        info.size = len(data) if declared is None else declared
        try:
            out.write(info.tobuf(format=tarfile.GNU_FORMAT))
        except ValueError:  # a field tarfile itself cannot write
            continue
        out.write(data + b"\0" * (-len(data) % tarfile.BLOCKSIZE))
    out.write(b"\0" * tarfile.BLOCKSIZE * 2)
    raw = out.getvalue()
    return gzip.compress(raw) if gz else raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(_MEMBER, max_size=12), duplicate=st.booleans(), gz=st.booleans())
def test_no_tar_file_lands_anything_outside_its_target(
    members: list[tuple[str, bytes, str, bytes, int | None]], duplicate: bool, gz: bool, tmp_path: Path
) -> None:
    if duplicate and members:
        members = [*members, members[0]]
    root = Path(os.path.realpath(tmp_path / f"case-{os.urandom(6).hex()}"))
    target, outside = root / "target", root / "outside"
    outside.mkdir(parents=True)
    try:
        unpack(io.BytesIO(_raw_tar(members, gz=gz)), target, ArchiveLimits(max_bytes=10_000, max_members=8),
               what="The tarball")
    except ArchiveRefused as exc:
        assert exc.user_message().startswith("The tarball ") and "\n" not in exc.user_message()
    assert sorted(p.name for p in root.iterdir()) == ["outside", "target"]
    assert list(outside.iterdir()) == []
    for path in target.rglob("*"):
        assert not path.is_symlink(), path
        assert path.is_file() or path.is_dir(), path
        real = Path(os.path.realpath(path))
        assert real.is_relative_to(target), real
