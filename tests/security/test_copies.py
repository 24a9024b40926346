"""Item 3: no copy follows a link.

A repository with ``a -> .`` (and ``b -> .``) once grew a staged copy from 100 KB to 1.2 GB: ``shutil.copytree``
followed the links, and ``write_sourcedir(dereference=True)`` packed what they pointed at. Now every copy of
code and the packed source dir walk the tree without following a link: a link is refused with one sentence
(own code may hold only regular files and folders), and the caps of own code hold for what is copied or packed.
"""

from __future__ import annotations

import os
import tarfile
import time
from pathlib import Path

import pytest

from jobs.backends.archives import ArchiveLimits, copy_tree
from jobs.backends.code_sources import CodeMaterializer, GitCodeSources
from jobs.backends.local.container import write_sourcedir
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import SpecError
from jobs.planning.plan import build_plan
from jobs.planning.reader import CommandReader
from tests.support.git_repos import GitRepo, make_repo
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401


def size_of(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*")) if folder.exists() else 0


@pytest.fixture
def looping_repo(tmp_path: Path) -> tuple[GitRepo, str]:
    """100 KB of code and two links to its own folder."""
    repo = make_repo(tmp_path / "git", "team")
    (repo.work / "jobs").mkdir()
    (repo.work / "jobs" / "a").symlink_to(".")
    (repo.work / "jobs" / "b").symlink_to(".")
    commit = repo.commit({"jobs/train.py": "print(1)\n", "jobs/weights.txt": "0" * 100_000})
    return repo, commit


def plan_of(repo: GitRepo, commit: str, bucket: str = "test-bucket") -> object:
    resolver = GitCodeSources(repo.bare.parent / "resolver-home")  # a full commit is taken as it is
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=resolver)
    # checkpoint_minutes=: the bot's spot entry goes beside the code, so the checkout is copied (staged) first.
    spec = reader.read(f"distilbert-spot code=git+{repo.url}@{commit} entry=jobs/train.py checkpoint_minutes=5")
    return build_plan(spec, bucket=bucket, lineage_id="loop")


def test_a_repository_that_links_to_itself_is_refused_on_the_local_backend(looping_repo: tuple[GitRepo, str],
                                                                            tmp_path: Path) -> None:
    repo, commit = looping_repo
    backend = LocalBackend(tmp_path / "home", clock=SystemClock(), offline=True)
    started = time.monotonic()

    with pytest.raises(SpecError) as refused:
        backend.launch("loop-1", plan_of(repo, commit))  # type: ignore[arg-type]

    assert "holds a symbolic link 'jobs/a' -> '.'; own code may hold only regular files and folders" in (
        refused.value.user_message())
    assert size_of(tmp_path / "home" / "code") < 1_000_000 and not (tmp_path / "home" / "local-jobs" / "loop-1").exists()
    assert time.monotonic() - started < 30


def test_a_repository_that_links_to_itself_is_refused_on_sagemaker(looping_repo: tuple[GitRepo, str],
                                                                   moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    repo, commit = looping_repo
    creates = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[creates]), code_home=tmp_path / "home")

    with pytest.raises(SpecError, match="holds a symbolic link 'jobs/a' -> '.'"):
        backend.launch("loop-1", plan_of(repo, commit, moto_aws.bucket))

    assert creates.calls == [] and size_of(tmp_path / "home" / "code" / "staged") == 0


def linked_folder(root: Path) -> Path:
    """A folder with a file, a link to itself and a link out (to a folder of secrets)."""
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "token").write_text("xoxb-secret\n")
    code = root / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    (code / "loop").symlink_to(".")
    (code / "out").symlink_to(root / "secrets")
    return code


def test_copying_a_tree_refuses_links_and_copies_nothing_through_them(tmp_path: Path) -> None:
    code = linked_folder(tmp_path)

    with pytest.raises(SpecError, match=r"The code holds a symbolic link '(loop|out)' -> "):
        copy_tree(code, tmp_path / "copy", ArchiveLimits(), what="The code")

    assert not list((tmp_path / "copy").rglob("token"))
    assert size_of(tmp_path / "copy") < 1000


def test_the_packed_source_dir_refuses_links_instead_of_dereferencing_them(tmp_path: Path) -> None:
    code = linked_folder(tmp_path)

    with pytest.raises(SpecError, match="The code holds a symbolic link"):
        write_sourcedir(code, tmp_path / "sourcedir.tar.gz")

    (code / "loop").unlink()
    (code / "out").unlink()
    write_sourcedir(code, tmp_path / "sourcedir.tar.gz")
    with tarfile.open(tmp_path / "sourcedir.tar.gz") as archive:
        assert archive.getnames() == ["train.py"] and all(m.isreg() for m in archive.getmembers())


def test_the_packed_source_dir_has_the_caps_of_own_code(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "data.bin").write_bytes(os.urandom(300_000))
    for index in range(20):
        (code / f"module_{index}.py").write_text("x = 1\n")

    with pytest.raises(SpecError, match="The code holds more than 200,000 bytes"):
        write_sourcedir(code, tmp_path / "a.tar.gz", ArchiveLimits(max_bytes=200_000))
    with pytest.raises(SpecError, match="The code holds more than 10 files"):
        write_sourcedir(code, tmp_path / "b.tar.gz", ArchiveLimits(max_members=10))


def test_the_staged_copy_of_a_checkout_has_the_caps_too(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"jobs/train.py": "print(1)\n", "jobs/data.txt": "1" * 300_000})
    home = tmp_path / "home"
    limits = ArchiveLimits(max_bytes=400_000)
    materializer = CodeMaterializer(home, GitCodeSources(home, limits=limits), limits=ArchiveLimits(max_bytes=100_000))
    plan = plan_of(repo, commit)

    with pytest.raises(SpecError, match="The code holds more than 100,000 bytes"):
        materializer.runnable(plan.estimator)  # type: ignore[attr-defined]
    assert not [p for p in (home / "code" / "staged").rglob("*") if p.is_file() and p.suffix != ".lock"]
