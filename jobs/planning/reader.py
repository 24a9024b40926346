"""From a /train command to the spec a lineage is launched with: team recipes, the grammar, then own code.

``read`` is what plan and launch use: the recipe named first (if any) is expanded by the grammar, the spec
is validated, and own code is checked against the operator's allowlist (``TRAINBOT_CODE_SOURCES``) and pinned:
a git REF becomes the commit it names now (``code_commit``), which the lineage keeps for its relaunches and
reports. Resolving needs git, so the resolver is a port (``jobs.backends.code_sources`` implements it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobs.errors import ConfigError
from jobs.planning.grammar import RecipeLookup, parse_command
from jobs.planning.own_code import CommitResolver, check_allowed, parse_code
from jobs.planning.spec import DEFAULT_MAX_INSTANCES, JobSpec


@dataclass(frozen=True)
class CommandReader:
    max_instances: int = DEFAULT_MAX_INSTANCES
    code_sources: tuple[str, ...] = ()  # TRAINBOT_CODE_SOURCES: the URL prefixes own code may come from
    resolver: CommitResolver | None = None
    recipes: RecipeLookup | None = None

    @classmethod
    def of(
        cls,
        *,
        max_instances: int,
        code_sources: Iterable[str] = (),
        resolver: CommitResolver | None = None,
        recipes: RecipeLookup | None = None,
    ) -> CommandReader:
        return cls(max_instances, tuple(code_sources), resolver, recipes)

    def parse(self, text: str) -> JobSpec:
        """The grammar with the team's recipes; no allowlist, no git (``trainbot parse``)."""
        return parse_command(text, max_instances=self.max_instances, recipes=self.recipes)

    def check(self, text: str) -> JobSpec:
        """The grammar, the recipes and the allowlist, with no git: own code's REF stays as typed."""
        spec = self.parse(text)
        if spec.code is not None:
            check_allowed(spec.code, self.code_sources)
        return spec

    def read(self, text_or_spec: str | JobSpec) -> JobSpec:
        """The spec to plan or launch: parsed (unless given), own code allowed and pinned."""
        spec = self.parse(text_or_spec) if isinstance(text_or_spec, str) else text_or_spec
        return self.pin(spec)

    def pin(self, spec: JobSpec) -> JobSpec:
        if spec.code is None:
            return spec
        check_allowed(spec.code, self.code_sources)
        source = parse_code(spec.code)
        if not source.is_git or spec.code_commit is not None:
            return spec
        if self.resolver is None:
            raise ConfigError("This bot cannot resolve git code (no resolver is wired); run it through `trainbot`.")
        commit = self.resolver.resolve_commit(source.url, source.ref)
        return spec.model_copy(update={"code_commit": commit})
