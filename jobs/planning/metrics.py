"""The metric definitions a plan sends to SageMaker, and the same definitions read back from a log.

Each default definition catches four spellings of one metric: the ``[metric] NAME=VALUE step=S`` lines the
bot's own scripts print; the dict a Trainer-based script prints while it trains
(``{'loss': 0.69, 'learning_rate': 5e-05, 'epoch': 0.5}``; transformers 5 quotes the numbers:
``{'loss': '0.6931', ...}``); and the ``***** eval metrics *****`` table that ``Trainer.log_metrics`` prints
at the end (``  eval_f1 = 88.1``), which is where the article's run_qa.py reports its evaluation; and the
unindented ``eval_loss = 0.2`` lines the Hugging Face SageMaker examples print after their final
``trainer.evaluate()``. The last value printed is the final one. ``metrics=NAME:REGEX,...`` adds a team's own (or
replaces a default of the same name); as SageMaker does, the first group of a pattern is the value, whatever
groups follow it. SageMaker scrapes the job's log with them; the local backend scrapes its log file with
:class:`MetricScanner`, so the report and loss curve read the same numbers on both.

A team's pattern runs over lines its own script prints: every pattern is compiled with RE2 (linear time, see
jobs.planning.patterns), and one RE2 cannot run (a backreference, a lookaround) is refused with a sentence.
The defaults are linear for a backtracking engine too (SageMaker runs its own copy of them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs.errors import SpecError
from jobs.planning.hyperparameters import show
from jobs.planning.patterns import LinearPattern, PatternError, capped, linear

#: What the bot's training scripts print as ``[metric]`` lines, and what a Trainer logs by default.
METRIC_NAMES = (
    "loss",
    "learning_rate",
    "epoch",
    "grad_norm",
    "eval_loss",
    "eval_exact_match",
    "eval_f1",
    "eval_accuracy",
    "train_loss",
    "train_runtime",
    "train_samples_per_second",
    "train_tokens_per_second",  # the LLM script's (train_sft.py): tokens trained a second, every process together
)
MAX_DEFINITIONS = 40  # SageMaker's limit on MetricDefinitions
MAX_REGEX_CHARS = 500  # SageMaker's limit on one definition's Regex
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]{0,63}", re.ASCII)
NUMBER = r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
_NUMPY_SCALAR = r"(?:np\.float(?:16|32|64)\()?"


def default_regex(name: str) -> str:
    """``[metric] NAME=V``, a printed dict's ``'NAME': V`` (quoted or not, or a numpy scalar), a
    ``Trainer.log_metrics`` table row ``  NAME   =   V``, or a script's own final ``NAME = V`` line, unindented, as
    the Hugging Face SageMaker examples print their evaluation (not for ``*_runtime``, printed as h:mm:ss)."""
    escaped = re.escape(name)
    table_row = "" if name.endswith("_runtime") else rf"|(?:^|\s){escaped}\s+=\s+"
    return rf"(?:\[metric\] {escaped}=|[\"']{escaped}[\"']: ?[\"']?{_NUMPY_SCALAR}{table_row}){NUMBER}"


#: The step of the bot's scripts' ``[progress] step=S max_steps=M ...`` lines: a SageMaker job's live progress
#: reads it from CloudWatch (jobs.backends.sagemaker.progress); it is not a metric of the report.
PROGRESS_DEFINITIONS: list[dict[str, str]] = [{"Name": "step", "Regex": r"\[progress\] step=([0-9]+)"}]
METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": name, "Regex": default_regex(name)} for name in METRIC_NAMES
] + PROGRESS_DEFINITIONS
PROGRESS_NAMES = frozenset(d["Name"] for d in PROGRESS_DEFINITIONS)

#: The step of a ``[metric] NAME=V step=S`` line. The name holds no ``=`` and the value no space, so a line of
#: ``=`` signs costs a backtracking engine one pass, not one per split (``\S+=\S+`` was quadratic).
_STEP = linear(r"\[metric\] [^\s=]+=[^\s=]+ step=([0-9]+)(?:\s|$)")
#: Splits ``a:RE1,b:RE2`` at the commas that start a new ``NAME:`` (a regex may hold commas itself).
_NEXT_DEFINITION = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_.\-/]{0,63}:)")


def parse_metrics_value(raw: str, key: str = "metrics") -> dict[str, str]:
    r"""``NAME:REGEX,NAME:REGEX`` -> {name: regex}, each checked: a sane name, a capturing group (SageMaker reads
    the first as the value, whatever follows: public examples write ``'loss': ([0-9]+(.|e\-)[0-9]+),?``)."""
    found: dict[str, str] = {}
    for part in _NEXT_DEFINITION.split(raw.strip()):
        name, colon, regex = part.strip().partition(":")
        if not colon or not regex:
            raise SpecError(
                f"{key} takes NAME:REGEX pairs separated by commas, e.g. {key}='f1:eval_f1=([0-9.]+)', "
                f"not {show(part)}."
            )
        if name in found:
            raise SpecError(f"{key}: {name} is defined twice: keep one regex for it.")
        found[name] = regex
    return check_user_metrics(found)


def check_user_metrics(metrics: Mapping[str, object]) -> dict[str, str]:
    """Names and regexes of a spec's own metrics; the total stays within SageMaker's 40 definitions."""
    checked: dict[str, str] = {}
    for name, regex in metrics.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise SpecError(
                f"Metric name {show(name)} is not valid: start with a letter or _, then letters, digits, _ . - /"
                " (at most 64)."
            )
        checked[name] = _check_regex(name, regex)
    total = len(definitions_for(checked))
    if total > MAX_DEFINITIONS:
        raise SpecError(
            f"A job has at most {MAX_DEFINITIONS} metric definitions (SageMaker's limit); these metrics make "
            f"{total} with the {len(METRIC_DEFINITIONS)} built in: drop {total - MAX_DEFINITIONS}."
        )
    return checked


def _check_regex(name: str, regex: object) -> str:
    if not isinstance(regex, str) or not regex or len(regex) > MAX_REGEX_CHARS:
        raise SpecError(f"Metric {name} needs a regex of 1 to {MAX_REGEX_CHARS} characters.")
    try:
        groups = linear(regex).groups
    except PatternError as exc:
        raise SpecError(f"Metric {name}: {show(regex)} cannot be used: {exc.reason}.") from None
    if groups < 1:
        raise SpecError(
            f"Metric {name}: the regex needs a (capturing group) around the number, which SageMaker reads as the "
            "value (the first group, when there are more), e.g. f1:eval_f1=([0-9.]+)."
        )
    return regex


def definitions_for(user: Mapping[str, str] | None) -> list[dict[str, str]]:
    """The defaults, with a user's regex in place of a default of the same name, then the user's own."""
    user = dict(user or {})
    merged = [{"Name": d["Name"], "Regex": user.pop(d["Name"], d["Regex"])} for d in METRIC_DEFINITIONS]
    return merged + [{"Name": name, "Regex": regex} for name, regex in user.items()]


# ---------------------------------------------------------------- reading a log


@dataclass(frozen=True)
class MetricScanner:
    """Finds every defined metric in a log line: ``(name, value, step or None)`` for each match. Patterns are
    RE2 (linear time) and a line is read up to MAX_LINE_CHARS, so no line costs more than its length."""

    patterns: tuple[tuple[str, LinearPattern], ...]

    @classmethod
    def of(cls, definitions: Iterable[Mapping[str, str]] | None = None) -> MetricScanner:
        """PatternError for a definition RE2 cannot run (a job saved before patterns were checked)."""
        chosen = METRIC_DEFINITIONS if definitions is None else definitions
        # A log's [progress] lines are read as progress (jobs.backends.local.state), not as a metric.
        return cls(tuple((d["Name"], linear(d["Regex"])) for d in chosen if d["Name"] not in PROGRESS_NAMES))

    def scan(self, line: str) -> list[tuple[str, float, int | None]]:
        line = capped(line)
        found: list[tuple[str, float, int | None]] = []
        step_match = _STEP.search(line)
        step = int(step_match.group(1)) if step_match else None
        for name, pattern in self.patterns:
            match = pattern.search(line)
            if match is None:
                continue
            try:
                found.append((name, float(match.group(1)), step))
            except (TypeError, ValueError):
                continue
        return found


_DEFAULT_SCANNER = MetricScanner.of()


def parse_metric_line(line: str) -> tuple[str, float, int | None] | None:
    """The first default metric on ``line``: ``[metric] loss=0.69 step=10`` -> ``("loss", 0.69, 10)``."""
    found = _DEFAULT_SCANNER.scan(line)
    return found[0] if found else None
