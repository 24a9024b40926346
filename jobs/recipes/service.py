"""Team recipes: ``/recipe save NAME <train arguments>``, then ``/train NAME key=value ...``.

A recipe is a name for validated /train arguments. Saved ones live in the database (only their author or an
admin may change or remove them); a team may also keep recipes in git, in a read-only YAML file
(``TRAINBOT_RECIPES_FILE``), which is read again whenever it changes. A recipe can never shadow a built-in
preset or a /train key, and a saved recipe cannot take the name of one in the file.

The recipe's text is stored, not its spec: a git REF in it is resolved afresh each time it is used (a
lineage then pins what it resolved to), and a preset it starts from keeps its current values.

A /train reads its recipe on the command's ack path: what was read is remembered for LOOKUP_MEMORY_SECONDS
(forgotten at once by a save or remove through this book), so another replica's change shows within that.
"""

from __future__ import annotations

import builtins
import logging
import re
import shlex
import threading
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from jobs.clock import Clock
from jobs.errors import BadInput, ConfigError, LimitReached, NotFound, PermissionDenied
from jobs.permissions import AccessPolicy
from jobs.planning.grammar import COMMAND, lookup_key, parse_command, tokenize
from jobs.planning.own_code import check_allowed
from jobs.planning.presets import PRESETS
from jobs.recent import RecentReads
from jobs.recipes import text as recipe_text
from jobs.recipes.store import Recipe, recipe_from_row
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.schema import read_transaction, recipes_table, write_transaction
from jobs.store.store import Store

log = logging.getLogger(__name__)

RECIPE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}", re.ASCII)
RESERVED_NAMES = frozenset({"help", "list", "show", "save", "remove"})
FILE_AUTHOR = "file"
LOOKUP_MEMORY_SECONDS = 10.0


class RecipeBook:
    def __init__(self, *, store: Store, settings: Settings, clock: Clock) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._policy = AccessPolicy.from_settings(settings)
        self._file = RecipesFile(settings.trainbot_recipes_file, max_instances=settings.trainbot_max_instances,
                                 code_sources=settings.trainbot_code_sources)
        # The saved recipe of each name key looked up lately (the file is read again whenever it changes).
        self._saved_recently: RecentReads[str, Recipe | None] = RecentReads(LOOKUP_MEMORY_SECONDS)

    @property
    def engine(self) -> Engine:
        return self._store.engine

    # -- the grammar's lookup ----------------------------------------------------------------------

    def lookup(self, name: str) -> str | None:
        """The /train arguments of recipe ``name`` (``-`` and ``_`` alike; the file's first), None when there
        is none."""
        if not RECIPE_NAME.fullmatch(name):
            return None
        key = name_key(name)
        from_file = self._from_file(key)  # the file is read again whenever it changes
        if from_file is not None:
            return from_file.text
        saved = self._saved_recently.get(key, lambda: self._saved(key))
        return None if saved is None else saved.text

    def _forget(self, name: str) -> None:
        self._saved_recently.forget(name_key(name))

    # -- managing ----------------------------------------------------------------------------------

    def save(self, name: str, text: str, *, actor: Actor) -> tuple[Recipe, bool]:
        """Validate ``text`` as /train would and store it under ``name``; (recipe, True) when it replaced one."""
        self._policy.check_can_use(actor)
        check_name(name)
        if any(name_key(n) == name_key(name) for n in self._file.recipes()):
            raise BadInput(recipe_text.IN_FILE.format(name=name, path=self._file.path))
        normalized = self._validated(text)
        now = self._clock.now()
        with write_transaction(self.engine) as conn:
            row = conn.execute(select(recipes_table).where(_same_name(name_key(name)))).first()
            if row is not None and row.name != name:
                raise BadInput(recipe_text.SAME_NAME.format(name=name, existing=row.name))
            if row is None:
                self._check_limit(conn, actor)
                conn.execute(insert(recipes_table).values(
                    name=name, text=normalized, created_by=actor.user_id, via=actor.via, created_at=now, updated_at=now
                ))
            else:
                self._check_author(actor, recipe_from_row(row), "change")
                conn.execute(update(recipes_table).where(recipes_table.c.name == name).values(
                    text=normalized, updated_at=now
                ))
        self._forget(name)
        self._store.audit(actor, "recipe.save", name, {"text": normalized, "replaced": row is not None})
        return self.show(name), row is not None

    def remove(self, name: str, *, actor: Actor) -> None:
        recipe = self.show(name)
        if recipe.read_only:
            raise BadInput(recipe_text.IN_FILE.format(name=name, path=recipe.source))
        self._check_author(actor, recipe, "remove")
        with write_transaction(self.engine) as conn:
            conn.execute(delete(recipes_table).where(recipes_table.c.name == recipe.name))
        self._forget(name)
        self._store.audit(actor, "recipe.remove", name, {"text": recipe.text})

    def show(self, name: str) -> Recipe:
        found = self._find(name)
        if found is None:
            raise NotFound(recipe_text.NOT_FOUND.format(name=name))
        return found

    def _find(self, name: str) -> Recipe | None:
        """The recipe whose name reads as ``name`` (``-`` and ``_`` alike): the file's, else a saved one."""
        key = name_key(name)
        return self._from_file(key) or self._saved(key)

    def _from_file(self, key: str) -> Recipe | None:
        return next((r for n, r in self._file.recipes().items() if name_key(n) == key), None)

    def _saved(self, key: str) -> Recipe | None:
        with read_transaction(self.engine) as conn:
            row = conn.execute(select(recipes_table).where(_same_name(key))).first()
        return None if row is None else recipe_from_row(row)

    def list(self) -> builtins.list[Recipe]:
        """Every recipe, the file's and the saved ones, by name."""
        with read_transaction(self.engine) as conn:
            rows = conn.execute(select(recipes_table).order_by(recipes_table.c.name)).all()
        found = {row.name: recipe_from_row(row) for row in rows}
        found.update(self._file.recipes())
        return [found[name] for name in sorted(found)]

    def file_problems(self) -> builtins.list[str]:
        """Entries of the recipes file that were left out, one sentence each."""
        self._file.recipes()
        return list(self._file.problems)

    # -- rules -------------------------------------------------------------------------------------

    def _validated(self, text: str) -> str:
        tokens = tokenize(text)
        if not tokens:
            raise BadInput(recipe_text.EMPTY)
        normalized = shlex.join(tokens)
        spec = parse_command(normalized, max_instances=self._settings.trainbot_max_instances)
        if spec.code is not None:
            check_allowed(spec.code, self._settings.trainbot_code_sources)
        return normalized

    def _check_limit(self, conn: Connection, actor: Actor) -> None:
        most = self._settings.trainbot_max_recipes_per_user
        query = select(func.count()).select_from(recipes_table).where(recipes_table.c.created_by == actor.user_id)
        have = int(conn.execute(query).scalar_one())
        if have >= most:
            raise LimitReached(recipe_text.TOO_MANY.format(count=have))

    def _check_author(self, actor: Actor, recipe: Recipe, verb: str) -> None:
        if actor.user_id == recipe.created_by or self._policy.is_admin(actor):
            return
        raise PermissionDenied(recipe_text.NOT_AUTHOR.format(name=recipe.name, author=recipe.created_by, verb=verb))


def check_name(name: str) -> None:
    """A recipe name: lowercase letters, digits, - and _; never a preset, a /train key or a command word,
    compared as the grammar reads keys (``-`` and ``_`` alike: ``use-spot`` is the key ``use_spot``)."""
    if not RECIPE_NAME.fullmatch(name):
        raise BadInput(recipe_text.BAD_NAME.format(name=name[:70]))
    if name_key(name) in {name_key(preset) for preset in PRESETS}:
        raise BadInput(recipe_text.PRESET_NAME.format(name=name, presets=", ".join(PRESETS)))
    if lookup_key(name) is not None or name_key(name) in {name_key(word) for word in RESERVED_NAMES}:
        raise BadInput(recipe_text.KEY_NAME.format(name=name, command=COMMAND))


def name_key(name: str) -> str:
    """The form recipe names are compared in: ``-`` and ``_`` alike (``squad_nightly`` is ``squad-nightly``)."""
    return name.replace("_", "-")


def _same_name(key: str) -> Any:
    return func.replace(recipes_table.c.name, "_", "-") == key


class RecipesFile:
    """TRAINBOT_RECIPES_FILE: ``recipes: {NAME: "train arguments", ...}`` (or the mapping alone), read again
    when the file changes. Entries that break the rules are left out and named in ``problems``."""

    def __init__(self, path: Path | None, *, max_instances: int, code_sources: tuple[str, ...] = ()) -> None:
        self.path = path
        self._max_instances = max_instances
        self._code_sources = code_sources
        self.problems: list[str] = []
        self._loaded: dict[str, Recipe] = {}
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def recipes(self) -> dict[str, Recipe]:
        if self.path is None:
            return {}
        try:
            stat = self.path.stat()
        except OSError as exc:
            raise ConfigError(recipe_text.FILE_UNREADABLE.format(path=self.path, reason=exc.strerror)) from None
        with self._lock:
            if self._stamp != (stat.st_mtime_ns, stat.st_size):
                self._loaded, self.problems = _read_file(self.path, self._max_instances, self._code_sources)
                self._stamp = (stat.st_mtime_ns, stat.st_size)
            return dict(self._loaded)


def _read_file(path: Path, max_instances: int, code_sources: tuple[str, ...]) -> tuple[dict[str, Recipe], list[str]]:
    try:
        data: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(recipe_text.FILE_UNREADABLE.format(path=path, reason=str(exc).splitlines()[0])) from None
    if isinstance(data, dict) and isinstance(data.get("recipes"), dict):
        data = data["recipes"]
    if not isinstance(data, dict):
        raise ConfigError(recipe_text.FILE_SHAPE.format(path=path))
    recipes: dict[str, Recipe] = {}
    problems: list[str] = []
    for name, value in data.items():
        try:
            check_name(str(name))
            if not isinstance(value, str) or not value.strip():
                raise BadInput(recipe_text.FILE_VALUE.format(name=name))
            normalized = shlex.join(tokenize(value))
            spec = parse_command(normalized, max_instances=max_instances)  # a broken entry is named now, not at use
            if spec.code is not None:
                check_allowed(spec.code, code_sources)  # the same allowlist as a saved recipe's
            recipes[str(name)] = Recipe(str(name), normalized, FILE_AUTHOR, str(path))
        except BadInput as exc:
            problems.append(f"{name}: {exc.user_message()}")
            log.warning("recipes file %s: %s", path, exc.user_message())
    return recipes, problems
