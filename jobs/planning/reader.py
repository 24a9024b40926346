"""From a /train command to the spec a lineage is launched with: team recipes, the grammar, then own code.

``read`` is what plan and launch use: the recipe named first (if any) is expanded by the grammar, the spec
is validated, and own code is checked against the operator's allowlist (``TRAINBOT_CODE_SOURCES``) and pinned:
a git REF becomes the commit it names now (``code_commit``), which the lineage keeps for its relaunches and
reports. Resolving needs git, so the resolver is a port (``jobs.backends.code_sources`` implements it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jobs.errors import BadInput, ConfigError
from jobs.planning.grammar import RecipeLookup, parse_command
from jobs.planning.own_code import (
    CommitResolver,
    EntryReader,
    check_allowed,
    is_full_commit,
    parse_code,
    script_saving,
)
from jobs.planning.spec import DEFAULT_MAX_INSTANCES, JobSpec, spec_from_fields


@dataclass(frozen=True)
class CommandReader:
    max_instances: int = DEFAULT_MAX_INSTANCES
    code_sources: tuple[str, ...] = ()  # TRAINBOT_CODE_SOURCES: the URL prefixes own code may come from
    resolver: CommitResolver | None = None
    recipes: RecipeLookup | None = None
    entries: EntryReader | None = None  # reads the pinned entry script, to say what saves its checkpoints
    # Why own code cannot run on this bot's backend at all (the local backend without its sandbox), or None.
    code_refusal: Callable[[], str | None] | None = None

    @classmethod
    def of(
        cls,
        *,
        max_instances: int,
        code_sources: Iterable[str] = (),
        resolver: CommitResolver | None = None,
        recipes: RecipeLookup | None = None,
        entries: EntryReader | None = None,
        code_refusal: Callable[[], str | None] | None = None,
    ) -> CommandReader:
        return cls(max_instances, tuple(code_sources), resolver, recipes, entries, code_refusal)

    def parse(self, text: str) -> JobSpec:
        """The grammar with the team's recipes; no allowlist, no git (``trainbot parse``)."""
        return parse_command(text, max_instances=self.max_instances, recipes=self.recipes)

    def check(self, text: str) -> JobSpec:
        """The grammar, the recipes and the allowlist, with no git: own code's REF stays as typed."""
        return self.allowed(self.parse(text))

    def allowed(self, spec: JobSpec) -> JobSpec:
        """``spec`` (a parsed one) when its own code, if any, is allowed and may run here."""
        if spec.code is not None:
            self._check_code(spec.code)
        return spec

    def waits_on_code_host(self, spec: JobSpec) -> bool:
        """Whether reading ``spec`` (a checked one) asks a git host: a REF to resolve, or a pinned entry to read
        from a commit not checked out yet. A surface draws such a card off its acknowledgement."""
        if spec.code is None:
            return False
        source = parse_code(spec.code)
        if not source.is_git:
            return False
        commit = spec.code_commit or (source.ref if source.ref and is_full_commit(source.ref) else None)
        if commit is None:
            return True
        if self.entries is None or spec.entry is None or spec.code_trainer is not None:
            return False
        return not self.entries.has_checkout(source.url, commit)

    def read(self, text_or_spec: str | JobSpec) -> JobSpec:
        """The spec to plan or launch: parsed (unless given), own code allowed and pinned."""
        spec = self.parse(text_or_spec) if isinstance(text_or_spec, str) else text_or_spec
        return self.pin(spec)

    def pin(self, spec: JobSpec) -> JobSpec:
        if spec.code is None:
            return spec
        self._check_code(spec.code)
        source = parse_code(spec.code)
        if source.is_git and spec.code_commit is None:
            if self.resolver is None:
                raise ConfigError("This bot cannot resolve git code (no resolver is wired); run it through `trainbot`.")
            spec = spec.model_copy(update={"code_commit": self.resolver.resolve_commit(source.url, source.ref)})
        return self._with_saving(spec)

    def _with_saving(self, spec: JobSpec) -> JobSpec:
        """What the pinned entry saves by itself and whether the spot entry can add saves to its Trainer; the
        spec is validated again with them, so ``checkpoint_minutes=`` on a script without a Trainer is refused."""
        if spec.code_trainer is not None or self.entries is None or spec.code is None or spec.entry is None:
            return spec
        source = parse_code(spec.code)
        text = self.entries.read_entry(source.url, spec.code_commit, spec.entry) if source.is_git else None
        if text is None:
            return spec
        trainer, saves = script_saving(text)
        fields = {**spec.model_dump(), "code_trainer": trainer, "code_saves": saves}
        return spec_from_fields(fields, max_instances=self.max_instances)

    def _check_code(self, code: str) -> None:
        check_allowed(code, self.code_sources)
        refusal = self.code_refusal() if self.code_refusal is not None else None
        if refusal:
            raise BadInput(refusal)
