"""Own code fetched for real: git REFs resolved and trees checked out from a repository the test makes,
S3 tarballs from the loopback moto server, and what SageMaker receives when a plan runs own code (the
CreateTrainingJob request as sent, and the source tarball really uploaded)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.code_sources import CodeMaterializer, GitCodeSources, S3Tarballs
from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.own_code import SPOT_ENTRY
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.planning.reader import CommandReader
from tests.support.git_repos import GitRepo, make_repo
from tests.support.moto_server import CallRecorder, MotoAws, sagemaker_backend

QA_DIR = "examples/pytorch/question-answering"
ARTICLE_HPS = {
    "model_name_or_path": "bert-large-uncased-whole-word-masking", "dataset_name": "squad", "do_train": True,
    "do_eval": True, "fp16": True, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 4,
    "num_train_epochs": 2, "max_seq_length": 384, "max_steps": 100, "pad_to_max_length": True, "doc_stride": 128,
    "output_dir": "/opt/ml/model",
}


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """A stand-in for the transformers repository: run_qa.py at tag v4.28.1, then main moves on."""
    repo = make_repo(tmp_path / "git", "transformers")
    repo.commit({f"{QA_DIR}/run_qa.py": "VERSION = 'v4.28.1'\n", f"{QA_DIR}/utils_qa.py": "# helper\n",
                 f"{QA_DIR}/requirements.txt": "datasets\n", "README.md": "transformers\n"}, "release")
    repo.tag("v4.28.1", annotated=True)
    repo.commit({f"{QA_DIR}/run_qa.py": "VERSION = 'main'\n"}, "after the release")
    return repo


def reader(repo: GitRepo, home: Path) -> CommandReader:
    return CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=GitCodeSources(home))


def plan(repo: GitRepo, home: Path, text: str, lineage: str = "own", bucket: str = "trainbot-test-bucket") -> LaunchPlan:
    spec = reader(repo, home).read(text.format(url=repo.url))
    return build_plan(spec, bucket=bucket, lineage_id=lineage, launched_by="U1", origin="cli")


# -- git ------------------------------------------------------------------------------------------------


def test_refs_resolve_to_commits(repo: GitRepo, tmp_path: Path) -> None:
    git = GitCodeSources(tmp_path / "home")
    release = repo.work / ".git"
    from tests.support.git_repos import git as run_git

    tagged = run_git(release.parent, "rev-parse", "v4.28.1^{commit}")
    head = run_git(release.parent, "rev-parse", "main")
    assert git.resolve_commit(repo.url, "v4.28.1") == tagged  # an annotated tag: the commit, not the tag object
    assert git.resolve_commit(repo.url, "main") == head
    assert git.resolve_commit(repo.url, None) == head
    assert git.resolve_commit(repo.url, tagged[:9]) == tagged  # a short commit, found by fetching
    assert git.resolve_commit(repo.url, tagged) == tagged
    with pytest.raises(SpecError, match="no branch or tag"):
        git.resolve_commit(repo.url, "v9")


def test_a_checkout_is_the_tree_at_the_pinned_commit_whatever_the_branch_does(repo: GitRepo, tmp_path: Path) -> None:
    git = GitCodeSources(tmp_path / "home")
    pinned = git.resolve_commit(repo.url, "main")
    repo.commit({f"{QA_DIR}/run_qa.py": "VERSION = 'later'\n"}, "main moves on")
    tree = git.checkout(repo.url, pinned)
    assert (tree / QA_DIR / "run_qa.py").read_text() == "VERSION = 'main'\n"
    assert not (tree / ".git").exists()
    assert git.checkout(repo.url, pinned) == tree  # cached: no second fetch


def test_a_missing_repository_is_one_sentence(tmp_path: Path) -> None:
    git = GitCodeSources(tmp_path / "home")
    with pytest.raises(Exception, match="Could not list the branches and tags of file://"):
        git.resolve_commit(f"file://{tmp_path}/nothing.git", "main")


def test_an_entry_missing_at_the_commit_is_named(repo: GitRepo, tmp_path: Path) -> None:
    home = tmp_path / "home"
    bad = plan(repo, home, f"bert-squad code=git+{{url}}@v4.28.1 entry={QA_DIR}/run_squad.py")
    with pytest.raises(SpecError, match="run_squad.py"):
        CodeMaterializer(home, GitCodeSources(home)).runnable(bad.estimator)


# -- S3 tarballs -------------------------------------------------------------------------------------------


def _tarball(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_an_s3_tarball_is_fetched_and_unpacked(moto_aws: MotoAws, tmp_path: Path) -> None:
    s3 = moto_aws.client("s3")
    s3.put_object(Bucket=moto_aws.bucket, Key="code/team.tar.gz", Body=_tarball({"src/train.py": "print(1)\n"}))
    tarballs = S3Tarballs(tmp_path / "home", lambda: s3)
    tree = tarballs.fetch(f"s3://{moto_aws.bucket}/code/team.tar.gz")
    assert (tree / "src" / "train.py").read_text() == "print(1)\n"
    evil = _tarball({"../escape.py": "x"})
    s3.put_object(Bucket=moto_aws.bucket, Key="code/evil.tar.gz", Body=evil)
    with pytest.raises(SpecError, match=r"holds the path '\.\./escape\.py', which climbs out of its folder"):
        tarballs.fetch(f"s3://{moto_aws.bucket}/code/evil.tar.gz")
    assert not (tmp_path / "home" / "code" / "escape.py").exists()


# -- what SageMaker receives -------------------------------------------------------------------------------


def _hp(request: dict[str, Any], name: str) -> Any:
    return json.loads(request["HyperParameters"][name])


def _uploaded(aws: MotoAws, request: dict[str, Any]) -> dict[str, bytes]:
    bucket, _, key = _hp(request, "sagemaker_submit_directory").removeprefix("s3://").partition("/")
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        return {m.name.removeprefix("./"): archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_articles_call_launches_its_estimator_with_the_entrys_folder_at_the_pinned_commit(
    repo: GitRepo, moto_aws: MotoAws, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    launched = plan(repo, home, f"bert-squad code=git+{{url}}@v4.28.1 entry={QA_DIR}/run_qa.py "
                                "hp.output_dir=/opt/ml/model", "article")  # the article's own output_dir
    tagged = launched.spec.code_commit
    est = launched.estimator
    assert est["git_config"] == {"repo": repo.url, "branch": "v4.28.1", "commit": tagged}
    assert (est["source_dir"], est["entry_point"]) == (f"./{QA_DIR}", "run_qa.py")
    assert est["hyperparameters"] == ARTICLE_HPS

    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=home)
    backend.launch("article-1", launched)
    request = recorder.by_name("article-1")
    assert _hp(request, "sagemaker_program") == "run_qa.py"
    assert _hp(request, "sagemaker_distributed_dataparallel_enabled") is True
    assert {k: _hp(request, k) for k in ARTICLE_HPS} == ARTICLE_HPS
    files = _uploaded(moto_aws, request)
    assert set(files) == {"run_qa.py", "utils_qa.py", "requirements.txt"}  # the entry's folder, nothing else
    assert files["run_qa.py"] == b"VERSION = 'v4.28.1'\n"  # the tag's commit, not main's
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags["trainbot:code"] == f"{repo.url.removesuffix('.git')}@{tagged[:7]}"


def test_own_metrics_are_sent_with_the_defaults(repo: GitRepo, moto_aws: MotoAws, tmp_path: Path) -> None:
    home = tmp_path / "home"
    launched = plan(repo, home, f"bert-squad code=git+{{url}}@main entry={QA_DIR}/run_qa.py metrics='f1x:F1 ([0-9.]+)'")
    recorder = CallRecorder()
    sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=home).launch("metrics-1", launched)
    sent = recorder.by_name("metrics-1")["AlgorithmSpecification"]["MetricDefinitions"]
    assert sent[-1] == {"Name": "f1x", "Regex": "F1 ([0-9.]+)"} and {d["Name"] for d in sent} >= {"loss", "eval_f1"}


def test_a_spot_job_ships_the_spot_entry_beside_the_script(repo: GitRepo, moto_aws: MotoAws, tmp_path: Path) -> None:
    home = tmp_path / "home"
    launched = plan(repo, home, f"distilbert-spot code=git+{{url}}@v4.28.1 entry={QA_DIR}/run_qa.py "
                                "checkpoint_minutes=10 hp.output_dir=/opt/ml/checkpoints", "spotown")
    recorder = CallRecorder()
    sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=home).launch("spotown-1", launched)
    request = recorder.by_name("spotown-1")
    assert _hp(request, "sagemaker_program") == SPOT_ENTRY
    assert request["Environment"]["TRAINBOT_USER_ENTRY"] == "run_qa.py"
    assert _hp(request, "output_dir") == "/opt/ml/checkpoints"
    assert request["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    files = _uploaded(moto_aws, request)
    assert files["run_qa.py"] == b"VERSION = 'v4.28.1'\n" and {SPOT_ENTRY, "trainbot_checkpoint_folders.py", "trainbot_rank_agreement.py"} <= set(files)


def test_a_plan_from_an_earlier_version_ships_todays_spot_entry_files(
    repo: GitRepo, moto_aws: MotoAws, tmp_path: Path
) -> None:
    """A lineage planned before the entry imported its sibling (or by a bot installed elsewhere) relaunches:
    the entry's files come from this install, not from the paths the stored plan names."""
    home = tmp_path / "home"
    launched = plan(repo, home, f"distilbert-spot code=git+{{url}}@v4.28.1 entry={QA_DIR}/run_qa.py "
                                "checkpoint_minutes=10", "oldplan")
    launched.estimator["dependencies"] = [f"/gone/install/training/{SPOT_ENTRY}"]
    recorder = CallRecorder()
    sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=home).launch("oldplan-2", launched)
    files = _uploaded(moto_aws, recorder.by_name("oldplan-2"))
    assert {SPOT_ENTRY, "trainbot_checkpoint_folders.py", "trainbot_rank_agreement.py"} <= set(files)
    assert files[SPOT_ENTRY] == (Path(__file__).resolve().parents[2] / "training" / SPOT_ENTRY).read_bytes()


def test_an_s3_tarball_is_passed_to_sagemaker_as_it_is(moto_aws: MotoAws, tmp_path: Path) -> None:
    uri = f"s3://{moto_aws.bucket}/code/team.tar.gz"
    spec = CommandReader.of(max_instances=16, code_sources=(f"s3://{moto_aws.bucket}/code/",)).read(
        f"model=m dataset=custom code={uri} entry=src/train.py"
    )
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]), code_home=tmp_path / "home")
    backend.launch("tarball-1", build_plan(spec, bucket=moto_aws.bucket, lineage_id="tarball"))
    request = recorder.by_name("tarball-1")
    assert _hp(request, "sagemaker_submit_directory") == uri and _hp(request, "sagemaker_program") == "src/train.py"


def test_a_plan_without_a_pinned_commit_is_not_launched(repo: GitRepo, moto_aws: MotoAws, tmp_path: Path) -> None:
    unpinned = build_plan(parse_command(f"bert-squad code=git+{repo.url}@main entry={QA_DIR}/run_qa.py"),
                          bucket=moto_aws.bucket, lineage_id="unpinned")
    backend = sagemaker_backend(moto_aws, code_home=tmp_path / "home")
    with pytest.raises(Exception, match="no pinned commit"):
        backend.launch("unpinned-1", unpinned)
