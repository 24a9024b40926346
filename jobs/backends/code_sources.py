"""A team's own training code on this machine: git REFs resolved to commits, trees checked out at a pinned
commit, S3 tarballs fetched, and the plan's own-code arguments turned into a folder a backend can run or upload.

The only place the bot runs git. Every tree is cached under ``TRAINBOT_HOME/code`` by what pins it (a
commit, or a tarball's ETag), so a relaunch of a lineage never fetches again and always runs the same files,
whatever the branch does meanwhile. git runs without a terminal (no password prompt can hang the bot), with
a timeout, and without the ``ext::`` transport.

Layout: ``code/git/<url hash>/repo.git`` (a bare fetch cache) and ``code/git/<url hash>/<commit>/`` (the tree
at that commit, without ``.git``); ``code/s3/<uri hash>-<etag>/`` (an extracted tarball);
``code/staged/<hash>/`` (a source folder plus the bot's spot entry, when a spot job needs it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from jobs.backends.archives import (
    ArchiveLimits,
    ArchiveRefused,
    copy_tree,
    is_debris,
    megabytes,
    unpack,
    walk_tree,
)
from jobs.errors import BackendError, SpecError, TrainbotError
from jobs.file_lock import exclusive_lock
from jobs.planning.own_code import USER_ENTRY_ENV, display, is_full_commit
from jobs.planning.plan import shipped_dependencies

logger = logging.getLogger(__name__)

#: Every git command of one checkout (the shallow fetch, the fallback fetch of every branch, the archive)
#: shares this deadline: a host that never answers holds one launch for two minutes, not ten.
GIT_TIMEOUT_S = 120
RESOLVE_TIMEOUT_S = 20  # ls-remote runs while a plan card is drawn: a slow host must not hold it for minutes
MAX_ENTRY_BYTES = 2_000_000  # an entry script is read to say what saves its checkpoints; no script is larger
#: HTTP(S) transfers slower than this many bytes a second for LOW_SPEED_S seconds are given up by git itself.
LOW_SPEED_BYTES = 1000
LOW_SPEED_S = 20
_HEX = frozenset("0123456789abcdef")
_DRAIN_BYTES = 1024 * 1024
#: git's words for a host that did not answer (as opposed to one that refused a shallow fetch of a commit).
_UNANSWERED = ("took longer", "too slow", "unable to access", "Could not resolve host", "Connection refused",
               "timed out", "Connection reset", "Empty reply")
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # never wait for a password
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "GIT_SSH_COMMAND": os.environ.get(
        "GIT_SSH_COMMAND", "ssh -o BatchMode=yes -o ConnectTimeout=15 -o ServerAliveInterval=15"
    ),
    "GIT_CONFIG_NOSYSTEM": "1",
}
_GIT_OPTIONS = (
    "-c", "protocol.ext.allow=never",
    "-c", f"http.lowSpeedLimit={LOW_SPEED_BYTES}",
    "-c", f"http.lowSpeedTime={LOW_SPEED_S}",
)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _complete(tree: Path) -> Path:
    """The marker beside a finished tree (beside, not inside: the tree is uploaded as it is)."""
    return tree.with_name(tree.name + ".complete")


class GitCodeSources:
    """`jobs.planning.own_code.CommitResolver` with git, and the cached trees of pinned commits."""

    def __init__(
        self, home: Path, *, git: str = "git", timeout: float = GIT_TIMEOUT_S, limits: ArchiveLimits | None = None
    ) -> None:
        self._root = Path(home).resolve() / "code" / "git"
        self._git = git
        self._timeout = timeout
        self._limits = limits or ArchiveLimits()

    # -- resolving ---------------------------------------------------------------------------------

    def resolve_commit(self, url: str, ref: str | None) -> str:
        """The commit ``ref`` names now (the default branch's head when None); a full sha is taken as is
        and checked when it is fetched."""
        if ref is not None and is_full_commit(ref):
            return ref
        wanted = ["HEAD"] if ref is None else [ref, f"refs/heads/{ref}", f"refs/tags/{ref}"]
        listed = self._ls_remote(url)
        for name in (f"refs/tags/{ref}^{{}}", *wanted) if ref is not None else wanted:
            if name in listed:
                return listed[name]
        if ref is not None and len(ref) >= 7 and set(ref) <= _HEX:
            return self._resolve_short_sha(url, ref)
        raise SpecError(
            f"{display(url, None)} has no branch or tag {ref!r}: check the name after @ "
            "(git ls-remote lists them), or give a commit."
        )

    def _ls_remote(self, url: str) -> dict[str, str]:
        out = self._run(["ls-remote", "--", url], what=f"list the branches and tags of {display(url, None)}",
                        timeout=min(self._timeout, RESOLVE_TIMEOUT_S))
        listed: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name and is_full_commit(sha):
                listed[name] = sha
        return listed

    def _resolve_short_sha(self, url: str, short: str) -> str:
        repo = self._fetch_cache(url)
        with exclusive_lock(repo.with_suffix(".lock")):
            self._run(["--git-dir", str(repo), "fetch", "--quiet", "--tags", "--", url,
                       "+refs/heads/*:refs/heads/*"], what=f"fetch {display(url, None)}",
                      timeout=self._timeout)
        try:
            return self._run(["--git-dir", str(repo), "rev-parse", "--verify", "--quiet", f"{short}^{{commit}}"],
                             what="").strip()
        except BackendError:
            raise SpecError(f"{display(url, None)} has no branch, tag or commit {short!r}.") from None

    # -- reading the entry (jobs.planning.own_code.EntryReader) ----------------------------------------

    def read_entry(self, url: str, commit: str | None, entry: str) -> str | None:
        """The entry script's text at ``commit`` (from the checkout a launch uses anyway); None when it cannot
        be read, which leaves the plan saying less, never failing it (a launch fails clearly later)."""
        if commit is None:
            return None
        try:
            path = self.checkout(url, commit) / entry
            with path.open("rb") as fh:
                data = fh.read(MAX_ENTRY_BYTES)
        except (BackendError, SpecError, OSError) as exc:
            logger.info("could not read %s at %s: %s", entry, commit, exc)
            return None
        return data.decode("utf-8", errors="replace")

    def has_checkout(self, url: str, commit: str) -> bool:
        return _complete(self._root / _hash(url) / commit).is_file()

    # -- checking out ------------------------------------------------------------------------------

    def checkout(self, url: str, commit: str) -> Path:
        """The repository's files at ``commit`` (cached; never a moving branch)."""
        tree = self._root / _hash(url) / commit
        if _complete(tree).is_file():
            return tree
        repo = self._fetch_cache(url)
        deadline = time.monotonic() + self._timeout
        with exclusive_lock(repo.with_suffix(".lock")):
            if _complete(tree).is_file():
                return tree
            self._fetch_commit(repo, url, commit, deadline)
            what = f"The code at {display(url, commit)}"
            with self._streamed(["--git-dir", str(repo), "archive", "--format=tar", commit],
                                what=f"read {display(url, commit)}", deadline=deadline) as archive:
                unpack_atomically(archive, tree, self._limits, what=what)
        logger.info("checked out %s into %s", display(url, commit), tree)
        return tree

    def _fetch_cache(self, url: str) -> Path:
        repo = self._root / _hash(url) / "repo.git"
        if not (repo / "HEAD").is_file():
            repo.mkdir(parents=True, exist_ok=True)
            self._run(["init", "--quiet", "--bare", str(repo)], what="prepare the code cache")
        return repo

    def _fetch_commit(self, repo: Path, url: str, commit: str, deadline: float) -> None:
        if self._has_commit(repo, commit):
            return
        what = f"fetch {display(url, commit)}"
        try:  # one commit, shallow: what GitHub and git's own protocol v2 serve for any reachable sha
            self._run(["--git-dir", str(repo), "fetch", "--quiet", "--depth", "1", "--", url, commit], what=what,
                      timeout=_left(deadline, self._timeout))
        except BackendError as exc:
            if time.monotonic() >= deadline or any(word in exc.user_message() for word in _UNANSWERED):
                raise  # a host that did not answer is not asked a second time
            logger.info("shallow fetch of %s failed; fetching the branches and tags", commit)
            self._run(["--git-dir", str(repo), "fetch", "--quiet", "--tags", "--", url,
                       "+refs/heads/*:refs/heads/*"], what=what, timeout=_left(deadline, self._timeout))
        if not self._has_commit(repo, commit):
            raise SpecError(f"{display(url, None)} has no commit {commit}: it may have been force-pushed away.")

    def _has_commit(self, repo: Path, commit: str) -> bool:
        try:
            self._run(["--git-dir", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"], what="")
        except BackendError:
            return False
        return True

    # -- running git -------------------------------------------------------------------------------

    def _run(self, args: Sequence[str], *, what: str, timeout: float | None = None) -> str:
        return self._run_bytes(args, what=what, timeout=timeout).decode(errors="replace")

    def _run_bytes(self, args: Sequence[str], *, what: str, timeout: float | None = None) -> bytes:
        argv = [self._git, *_GIT_OPTIONS, *args]
        limit = timeout or RESOLVE_TIMEOUT_S  # local bookkeeping (init, cat-file, rev-parse) is quick
        try:
            done = subprocess.run(argv, capture_output=True, timeout=limit, env=_git_env(), check=False)
        except FileNotFoundError:
            raise _no_git() from None
        except subprocess.TimeoutExpired:
            raise BackendError(f"Could not {what}: git took longer than {limit:.0f} s.") from None
        if done.returncode != 0:
            reason = _reason(done.stderr.decode(errors="replace"))
            raise BackendError(f"Could not {what}: {reason}" if what else reason)
        return done.stdout

    @contextmanager
    def _streamed(self, args: Sequence[str], *, what: str, deadline: float) -> Iterator[IO[bytes]]:
        """git's stdout as a stream (``git archive``: never held in memory), killed at the deadline or as soon
        as the reader gives up; git's own failure is what is raised when it failed."""
        with tempfile.TemporaryFile() as errors:
            try:
                proc = subprocess.Popen([self._git, *_GIT_OPTIONS, *args], stdout=subprocess.PIPE, stderr=errors,
                                        env=_git_env())
            except FileNotFoundError:
                raise _no_git() from None
            assert proc.stdout is not None
            watchdog = threading.Timer(_left(deadline, self._timeout), proc.kill)
            watchdog.start()
            try:
                yield proc.stdout
                proc.stdout.read(_DRAIN_BYTES)  # the archive's zero padding after its end marker
                code = proc.wait(timeout=_left(deadline, self._timeout))
            except BaseException:
                ended = _ended_or_killed(proc)
                if ended is None or ended == 0:
                    raise  # the reader refused what git sent (or git was stopped for it)
                raise self._git_failure(what, ended, errors, deadline) from None
            finally:
                watchdog.cancel()
                proc.stdout.close()
            if code != 0:
                raise self._git_failure(what, code, errors, deadline)

    def _git_failure(self, what: str, code: int, errors: IO[bytes], deadline: float) -> BackendError:
        if code < 0 and time.monotonic() >= deadline:
            return BackendError(f"Could not {what}: git took longer than {self._timeout:.0f} s.")
        errors.seek(0)
        return BackendError(f"Could not {what}: {_reason(errors.read(64 * 1024).decode(errors='replace'))}")


def _ended_or_killed(proc: subprocess.Popen[bytes]) -> int | None:
    """git's exit code when it had ended on its own (a failure that cut the archive short); None when it had
    to be killed because the reader stopped first."""
    try:
        return proc.wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def _reason(stderr: str) -> str:
    """git's own reason: its first fatal or error line (what follows is advice such as "Please make sure you
    have the correct access rights / and the repository exists.", which says nothing cut to its last line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    reasons = [line for line in lines if line.startswith(("fatal: ", "error: "))]
    text = (reasons or lines or ["git failed"])[0]
    return text.removeprefix("fatal: ").removeprefix("error: ")


def _git_env() -> dict[str, str]:
    return {**os.environ, **_GIT_ENV}


def _left(deadline: float, cap: float) -> float:
    return max(1.0, min(cap, deadline - time.monotonic()))


def _no_git() -> BackendError:
    return BackendError("git is not installed on the bot's machine: install git to run code=git+... jobs.")


def unpack_atomically(source: IO[bytes], dest: Path, limits: ArchiveLimits, *, what: str) -> None:
    """Unpack the tar arriving on ``source`` (git archive, or a team's .tar.gz) into ``dest`` atomically,
    every member checked (jobs.backends.archives); a refused archive leaves nothing behind."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tmp-"))
    try:
        unpack(source, tmp / "tree", limits, what=what)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp / "tree", dest)
        _complete(dest).write_text("")
    except OSError as exc:
        raise BackendError(f"Could not unpack the code into {dest}: {exc}.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- S3 tarballs


class S3Tarballs:
    """Fetches ``s3://BUCKET/KEY.tar.gz`` with a boto3 S3 client and unpacks it (cached by its ETag)."""

    def __init__(self, home: Path, s3_client: Callable[[], Any], *, limits: ArchiveLimits | None = None) -> None:
        self._root = Path(home).resolve() / "code" / "s3"
        self._client = s3_client  # called on first use: a local run of git code needs no AWS at all
        self._limits = limits or ArchiveLimits()

    def fetch(self, uri: str) -> Path:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        client = self._client()
        try:
            head = client.head_object(Bucket=bucket, Key=key)
            etag = str(head.get("ETag", "")).strip('"')
            tree = self._root / f"{_hash(uri)}-{etag[:16]}"
            if _complete(tree).is_file():
                return tree
            what = f"The code tarball {uri}"
            size = int(head.get("ContentLength") or 0)
            if size > self._limits.max_bytes:  # never fetched: even packed it is more than it may unpack to
                raise ArchiveRefused(f"{what} is {megabytes(size)}, more than the {megabytes(self._limits.max_bytes)} "
                                     "own code may unpack to (TRAINBOT_CODE_MAX_BYTES).")
            with exclusive_lock(tree.with_suffix(".lock")):
                if not _complete(tree).is_file():
                    body = client.get_object(Bucket=bucket, Key=key)["Body"]  # streamed, never held whole
                    try:
                        unpack_atomically(body, tree, self._limits, what=what)
                    finally:
                        body.close()
        except TrainbotError:
            raise
        except Exception as exc:  # botocore's errors: the backend layer names the object and the cause
            raise BackendError(f"Could not fetch the code tarball {uri}: {exc}.") from exc
        return tree


# ---------------------------------------------------------------- plan -> runnable folder


@dataclass(frozen=True)
class RunnableSource:
    """A folder a backend can upload or run: ``entry_point`` is a path inside ``source_dir``."""

    source_dir: str  # a local folder, or an s3:// tarball the SDK takes as it is
    entry_point: str
    environment: dict[str, str] = field(default_factory=dict)


@dataclass
class CodeMaterializer:
    """Turns a plan's code arguments (the article's ``git_config``/``source_dir``/``entry_point``, or an
    ``s3://`` tarball, plus ``dependencies``) into a :class:`RunnableSource`."""

    home: Path
    git: GitCodeSources
    tarballs: S3Tarballs | None = None
    limits: ArchiveLimits = field(default_factory=ArchiveLimits)

    def runnable(self, estimator: dict[str, Any], *, keep_s3: bool = False) -> RunnableSource:
        """``keep_s3``: an s3:// tarball without extra files is passed on as it is (SageMaker fetches it)."""
        source_dir = str(estimator.get("source_dir", ""))
        entry = str(estimator.get("entry_point", ""))
        env = {str(k): str(v) for k, v in (estimator.get("environment") or {}).items()}
        extras = shipped_dependencies(estimator)
        git_config = estimator.get("git_config")
        if isinstance(git_config, dict):
            commit = git_config.get("commit")
            if not commit:
                raise BackendError("The plan's git code has no pinned commit; plan it again to resolve its REF.")
            tree = self.git.checkout(str(git_config["repo"]), str(commit))
            folder = _inside(tree, source_dir)
        elif source_dir.startswith("s3://"):
            if keep_s3 and not extras:
                return RunnableSource(source_dir, entry, env)
            if self.tarballs is None:
                raise BackendError("This backend cannot fetch code from S3: it has no AWS client.")
            folder = self.tarballs.fetch(source_dir)
        else:
            return RunnableSource(source_dir, entry, env)  # the bot's own training/ folder
        if extras:
            folder = self._staged(folder, extras)
        if not (folder / entry).is_file():
            shown = env.get(USER_ENTRY_ENV, entry)
            raise SpecError(f"The code has no {posixpath.join(source_dir, shown)}: check entry= against the repository.")
        for variable, user_entry in env.items():
            if variable == USER_ENTRY_ENV and not (folder / user_entry).is_file():
                raise SpecError(f"The code has no {user_entry} under {source_dir}: check entry= against the repository.")
        return RunnableSource(str(folder), entry, env)

    def _staged(self, folder: Path, extras: list[Path], *, key: str | None = None) -> Path:
        """A copy of ``folder`` without its debris, with the extra files beside its contents (the SDK's
        ``dependencies``)."""
        key = key or _hash("|".join([str(folder), *(f"{p}:{p.stat().st_mtime_ns}" for p in extras)]))
        staged = Path(self.home).resolve() / "code" / "staged" / key
        with exclusive_lock(staged.with_suffix(".lock")):
            if not _complete(staged).is_file():
                tmp = Path(tempfile.mkdtemp(dir=_made(staged.parent), prefix=".tmp-"))
                try:
                    # Links refused, never followed; debris (caches, leftovers) is not code and stays behind.
                    copy_tree(folder, tmp, self.limits, what="The code", skip=is_debris)
                    for extra in extras:  # the bot's own files (the spot entry)
                        shutil.copy2(extra, tmp / extra.name)
                    shutil.rmtree(staged, ignore_errors=True)
                    os.replace(tmp, staged)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                _complete(staged).write_text("")
        return staged


    def without_debris(self, folder: Path) -> Path:
        """``folder`` as the code to upload: itself when it holds no debris (is_debris), else a clean copy kept
        under ``code/staged`` by what it holds. The SDK tars source_dir whole; a checkout, the bot's own
        training/ and a team's working tree gather ``__pycache__`` and the like, which is no part of the code."""
        found: list[str] = []

        def skip(name: str) -> bool:
            if is_debris(name):
                found.append(name)
                return True
            return False

        kept = [(str(rel), info.st_size, info.st_mtime_ns)
                for rel, info in walk_tree(folder, self.limits, what="The code", skip=skip)]
        if not found:
            return folder
        return self._staged(folder, [], key=_hash(f"{folder}|{kept}"))


def _inside(tree: Path, source_dir: str) -> Path:
    folder = (tree / source_dir).resolve()
    if folder != tree.resolve() and tree.resolve() not in folder.parents:
        raise SpecError(f"source_dir {source_dir!r} leaves the repository.")
    if not folder.is_dir():
        raise SpecError(f"The code has no folder {source_dir!r} at this commit: check entry= against the repository.")
    return folder


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def handler_folder(home: Path, handler: Any, *, s3: Callable[[], Any] | None = None) -> Path:
    """The folder of a team's inference handler (``jobs.endpoints.port.InferenceCode``): ``handler.folder`` in
    the job's code at its pinned commit (the training entry's folder when it names none), without debris; the
    handler file must be there."""
    limits = ArchiveLimits()
    code = CodeMaterializer(Path(home), GitCodeSources(Path(home), limits=limits),
                            S3Tarballs(Path(home), s3, limits=limits) if s3 else None, limits=limits)
    estimator = dict(handler.code)
    root_dir = str(estimator.get("source_dir", "."))
    if handler.folder:  # a folder of the repository (or tarball), not of the training entry's
        estimator["source_dir"] = handler.folder if "git_config" in estimator else root_dir
    estimator["entry_point"] = handler.entry_point
    if "git_config" not in estimator and str(estimator.get("source_dir", "")).startswith("s3://"):
        folder = code.tarballs.fetch(str(estimator["source_dir"])) if code.tarballs else None
        if folder is None:
            raise BackendError("This backend cannot fetch code from S3: it has no AWS client.")
        folder = _inside(folder, handler.folder or ".")
        if not (folder / handler.entry_point).is_file():
            raise SpecError(f"The code has no {handler.entry_point} in {handler.folder or 'its root'}: check "
                            "entry_point= and source_dir= against the repository.")
        return code.without_debris(folder)
    source = code.runnable(estimator)
    return code.without_debris(Path(source.source_dir))
