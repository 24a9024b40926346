"""`trainbot console`: the bot in a terminal, on the local backend, through the same router as Slack.

A line is one of:
- a slash command (`/train bert-squad`, `/jobs`, `/job ID`, `/stop ID`, `/deploy ...`, `/schedule ...`,
  `/logs ID`, `/notify ...`, `/home`: Slack's App Home as a message),
  handed to `handlers.router.run_command` exactly as Slack hands it a slash command;
- a button label (`launch`, `stop`, optionally followed by a job id): the newest card showing that button
  is pressed through `handlers.router.run_action`, as Slack does on a click;
- a console command: `/capacity JOB` (simulate a spot reclaim), `/wait [JOB]` (for scripts), `help`, `quit`.
`$last` and `$1`, `$2`, ... stand for the jobs launched in this session (newest, first, second ...), so a
script can name a job whose id it cannot know in advance.

`--script FILE` reads FILE's lines as if typed (blank lines and `#` comments skipped), echoing each after
the prompt. A bad line is named back and the script goes on. When the lines are done it waits for the jobs
the script launched to end and their reports to be shown, then exits 0, or 1 when one of them failed or was
given up on (a job the script stopped counts as ended as asked).

On the local backend the console polls every second and relaunches after 2 s, unless
TRAINBOT_POLL_SECONDS or TRAINBOT_RELAUNCH_BACKOFF_SECONDS say otherwise: local jobs take seconds,
not hours, and a terminal should show their changes as they happen.
"""

from __future__ import annotations

import contextlib
import getpass
import re
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.console_cards import NotPressed, Press
from bot.console_chat import PROMPT, ConsoleChat, Screen
from bot.console_jobs import JobTicker, session_lineages
from bot.wiring import build_watcher
from handlers import blocks as bk
from handlers import router
from handlers.context import CommandContext, Services
from jobs.endings.steps import ANNOUNCE
from jobs.errors import TrainbotError
from jobs.lineage import Lineage, LineageStatus
from jobs.records import Actor
from jobs.store.card_redraws import CardRedraws

if TYPE_CHECKING:
    from bot.wiring import Runtime

CHANNEL = "CONSOLE"
LOCAL_POLL_SECONDS = 1.0
LOCAL_BACKOFF_SECONDS = 2.0
#: How long a script line may wait for its background work (a launch, a stop) before the next line.
LINE_SETTLE_SECONDS = 120.0
#: After the jobs ended: the longest wait for the outbox to show their last notifications.
DRAIN_SECONDS = 120.0
_PLACEHOLDER = re.compile(r"\$(last|\d+)\b")
_FAILED = (LineageStatus.FAILED, LineageStatus.GAVE_UP)
YES = ("y", "yes")
NO = ("n", "no", "")
ANSWER_PROMPT = "[y/N] "
NOT_PRESSED = "Not pressed: {label} on {title}."
NOT_AN_ANSWER = "`{line}` is not a yes or no, so {label} on {title} was not pressed; carrying out `{line}` instead."
ENDPOINT_STOPPED = ("Stopped endpoint {name}, which this console started (its server holds a model in memory); "
                    "`/deploy {lineage} name={name}` brings it back.")
ENDPOINT_KEPT = "Endpoint {name} keeps running (an earlier session started it): `trainbot undeploy {name}` stops it."
UNANSWERED = "The question about {label} on {title} was left unanswered: nothing was pressed."

HELP = """\
Commands (the same as in Slack):
  /train [PRESET] key=value ...   plan a job (presets: bert-squad, roberta-mnli, distilbert-spot); /train help
  /jobs [active]                  list jobs            /job ID      one job, its attempts and spec
  /stop ID                        stop a job           /deploy, /predict, /undeploy, /schedule  as in Slack
  /deploy ID name=EXISTING        offer to promote ID into a live endpoint in place (then: promote)
  /rollback NAME [why]            back to the model it served before    /endpoint NAME   its history
  /models [LINE]                  the model registry: lines, versions, metrics, where each serves
  /logs ID [N]                    the last N lines of each host's log (default 40)
  /notify on [EVENTS] | off | list | dm on|off   route job events to this console (/notify help)
  /home                           the App Home: your jobs, the team's spend, endpoints, schedules
  /recipe save NAME ARGS | list | show NAME | remove NAME   team recipes, then /train NAME key=value ...
Buttons: type a card's button label to press it (launch, edit, cancel, stop, deploy, promote, rollback); add a job id to
  pick the card, e.g. `stop $last`. Buttons you can press now: {labels}
Console only:
  /capacity JOB                   take a running spot job's capacity away (simulated reclaim)
  /wait [JOB]                     wait until the job (or every job of this session) has ended
  $last, $1, $2 ...               the newest, first, second ... job launched in this session
  help, quit"""


def run_console(runtime: Runtime, script: Path | None = None, *, stdin: TextIO | None = None,
                stdout: TextIO | None = None) -> int:
    """The console loop; returns the exit code (see the module docstring)."""
    stdin = stdin or sys.stdin
    stdout = stdout or _utf8(sys.stdout)
    if script is not None and not script.is_file():
        print(f"trainbot: script {script} does not exist; give the path of a text file of commands.",
              file=sys.stderr)
        return 2
    tune_for_terminal(runtime)
    interactive = script is None and stdin.isatty()
    if interactive:
        _line_editing()
    console = Console(runtime, Screen(stdout, redraw_prompt=interactive), interactive=interactive)
    console.start()
    try:
        if script is not None:
            return console.run_script(script.read_text(encoding="utf-8").splitlines())
        return console.run_lines(stdin, interactive=interactive)
    except KeyboardInterrupt:
        console.chat.say("", "interrupted; running jobs keep training and show up at the next start")
        return 130
    finally:
        console.stop()


def tune_for_terminal(runtime: Runtime) -> None:
    """Poll and relaunch at terminal speed on the local backend, unless the environment set them."""
    settings = runtime.settings
    overrides: dict[str, float] = {}
    if "trainbot_poll_seconds" not in settings.model_fields_set:
        overrides["trainbot_poll_seconds"] = LOCAL_POLL_SECONDS
    if "trainbot_relaunch_backoff_seconds" not in settings.model_fields_set:
        overrides["trainbot_relaunch_backoff_seconds"] = LOCAL_BACKOFF_SECONDS
    if not overrides:
        return
    runtime.settings = settings.model_copy(update=overrides)
    runtime.watcher = build_watcher(runtime.store, runtime.backend, runtime.clock, runtime.settings)


class Console:
    """One terminal session: turns lines into router calls and keeps track of what they started."""

    def __init__(self, runtime: Runtime, screen: Screen, *, interactive: bool = False,
                 auto_reclaim: bool = True) -> None:
        self.runtime = runtime
        self.interactive = interactive
        home = runtime.settings.trainbot_home
        user = _user()
        self.actor = Actor(user_id=f"console:{user}", channel_id=CHANNEL, via="console", display=user)
        self.chat = ConsoleChat(screen, home / "uploads", user=self.actor.user_id)
        # One person at a terminal: work that waits on a git host is counted like the rest (no pool of its own).
        self.services: Services = replace(runtime.services(), run_later=self._run_later, backend=runtime.backend,
                                          run_on_code_host=None)
        self.started_at = runtime.clock.now()
        self.ticker = JobTicker(store=runtime.store, spot=runtime.simulation, say=self.chat.say,
                                session=self.session, auto_reclaim=auto_reclaim)
        self._pending = 0
        self._idle = threading.Condition()
        self._stop = threading.Event()
        self._quit = False
        self._question: Press | None = None  # a press waiting for its y/N

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.runtime.start_background(self.chat)
        threading.Thread(target=self.ticker.run, args=(self._stop,), name="trainbot-console", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._stop_endpoints()
        self.runtime.shutdown()

    def _stop_endpoints(self) -> None:
        """The local endpoint servers this session started are stopped with it (each holds a model in memory);
        one an earlier session started is named, with how to stop it."""
        endpoints = self.runtime.endpoints
        if endpoints is None or self.runtime.backend.name != "local":
            return
        for endpoint in endpoints.list():
            if endpoint.deployed_by != self.actor.user_id or endpoint.created_at < self.started_at:
                self.chat.say(ENDPOINT_KEPT.format(name=endpoint.name))
                continue
            try:
                endpoints.undeploy(endpoint.name, actor=self.actor)
                self.chat.say(ENDPOINT_STOPPED.format(name=endpoint.name, lineage=endpoint.lineage_id))
            except TrainbotError as exc:
                self.chat.say(exc.user_message())

    # -- the loops -------------------------------------------------------------------------------

    def run_lines(self, stdin: TextIO, *, interactive: bool) -> int:
        self.chat.say(f"trainbot console on the {self.runtime.backend.name} backend; type help, or quit to leave")
        while not self._quit:
            line = self._read(stdin, interactive=interactive)
            if line is None:
                break
            self.handle(line)
            if not interactive:  # piped lines, like a script's: each after the last one's launch or stop
                self.settle()
        self._drop_question()
        self._say_still_running()
        return 0

    def run_script(self, lines: list[str]) -> int:
        self.play(lines)
        self._drop_question()
        self.wait_for(None)
        return self.exit_code()

    def play(self, lines: list[str]) -> None:
        """Lines as if typed, each after the previous one's background work (a launch, a stop) is done.
        A question (`stop` asks y/N) takes the next line as its answer."""
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            self.chat.say(f"{self.prompt()}{line}")
            self.handle(line)
            self.settle()
            if self._quit:
                break

    def _drop_question(self) -> None:
        press, self._question = self._question, None
        if press is not None:
            self.chat.say(UNANSWERED.format(label=press.button.label, title=press.card.title))

    def _read(self, stdin: TextIO, *, interactive: bool) -> str | None:
        prompt = self.prompt()
        self.chat.screen.prompt(True, prompt)
        try:
            if interactive:
                return input(prompt)
            raw = stdin.readline()
            if not raw:
                return None
            self.chat.say(f"{prompt}{raw.rstrip()}")  # piped input: show it as if typed
            return raw
        except EOFError:
            return None
        finally:
            self.chat.screen.prompt(False)

    # -- one line --------------------------------------------------------------------------------

    def handle(self, line: str) -> None:
        """Carry out one line; every problem is said back in one sentence."""
        if self._question is not None:
            self._answer(line)
            return
        line = line.strip()
        if not line:
            return
        try:
            line = self._expand(line)
        except ValueError as exc:
            self.chat.say(str(exc))
            return
        word, _, rest = line.partition(" ")
        lowered = word.lower()
        if lowered in ("quit", "exit", "/quit", "/exit"):
            self._quit = True
        elif lowered in ("help", "/help", "?"):
            self.chat.say(HELP.format(labels=", ".join(self.chat.labels()) or "none yet"))
        elif lowered == "/capacity":
            self._capacity(rest.strip())
        elif lowered == "/wait":
            self.wait_for(rest.strip() or None)
        elif lowered.startswith("/"):  # typed as into Slack, which sends & < > escaped
            self.chat.show(router.run_command(self._context(), lowered, bk.escape(rest)))
        else:
            self._press(line)

    def _press(self, line: str) -> None:
        label, _, target = line.partition(" ")
        found = self.chat.find(line)  # a label of several words ("Launch in DM")
        if not isinstance(found, Press):
            found = self.chat.find(label, target.strip()) if target.strip() else self.chat.find(label)
        if found is None:
            self.chat.say(_unknown(line, self.chat.labels()))
        elif isinstance(found, NotPressed):
            self.chat.say(found.sentence)
        elif found.button.confirm is not None:  # Slack asks before a dangerous button: so does the console
            self._question = found
            self.chat.say(f"{found.button.confirm} [y/N]")
        else:
            self._press_now(found)

    def _press_now(self, press: Press) -> None:
        card, button = press.card, press.button
        reply = router.run_action(self._context(), button.action_id, button.value)
        if reply is not None:
            self.chat.show(reply, replaces=card.key if card.ephemeral else None, answered_by=button.label)
        elif card.ephemeral:
            self.chat.retire(card.key, answered_by=button.label)

    def _answer(self, line: str) -> None:
        """The line typed at a y/N question. Anything but an answer is no answer: nothing is pressed and the
        line is carried out as typed, never swallowed."""
        press, self._question = self._question, None
        assert press is not None
        word = line.strip().lower()
        if word in YES:
            self._press_now(press)
        elif word in NO:
            self.chat.say(NOT_PRESSED.format(label=press.button.label, title=press.card.title))
        else:
            self.chat.say(NOT_AN_ANSWER.format(line=line.strip(), label=press.button.label, title=press.card.title))
            self.handle(line)

    def prompt(self) -> str:
        """What the next line answers: a command, or a y/N question."""
        return ANSWER_PROMPT if self._question is not None else PROMPT

    def _capacity(self, ref: str) -> None:
        if not ref:
            self.chat.say("Usage: /capacity JOB (a running spot job: its lineage id, job name or $last).")
            return
        try:
            lineage = self.services.jobs.get(ref)
        except TrainbotError as exc:
            self.chat.say(exc.user_message())
            return
        attempt = lineage.latest_attempt
        if attempt is None or attempt.status.is_terminal() or not lineage.spec.spot:
            self.chat.say(f"{lineage.id} is not a running spot job (it {lineage.status.phrase()}); nothing to take "
                          "away.")
            return
        self.ticker.arm(attempt.job_name)
        self.chat.say(f"console: spot capacity will be taken from {attempt.job_name} once it has a checkpoint")

    def _context(self) -> CommandContext:
        return CommandContext(actor=self.actor, channel_id=CHANNEL, services=self.services, chat=self.chat)

    def _expand(self, line: str) -> str:
        """$last, $1, $2 ... -> the lineage ids of this session's jobs."""
        if "$" not in line:
            return line
        ids = [lineage.id for lineage in self.session()]

        def one(match: re.Match[str]) -> str:
            which = match.group(1)
            index = len(ids) - 1 if which == "last" else int(which) - 1
            if not 0 <= index < len(ids):
                raise ValueError(f"${which} names no job: this session has launched {len(ids)} so far.")
            return ids[index]

        return _PLACEHOLDER.sub(one, line)

    # -- background work and waiting -------------------------------------------------------------

    def _run_later(self, work: object) -> None:
        """The runtime's executor, counted, so a script can wait for a launch before its next line."""
        with self._idle:
            self._pending += 1

        def counted() -> None:
            try:
                work()  # type: ignore[operator]
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

        self.runtime.run_later(counted)

    def settle(self, timeout: float = LINE_SETTLE_SECONDS) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0, timeout=timeout)

    def session(self) -> list[Lineage]:
        return session_lineages(self.runtime.store, self.actor, self.started_at)

    def wait_for(self, ref: str | None) -> None:
        """Until the job (or every job of the session) has ended, what follows each ending is done (its
        report among it) and the outbox has shown everything it owed about them."""
        self.settle()
        try:
            targets = [self.services.jobs.get(ref).id] if ref else [lineage.id for lineage in self.session()]
        except TrainbotError as exc:
            self.chat.say(exc.user_message())
            return
        while not self._stop.is_set() and not all(self._ended(lineage_id) for lineage_id in targets):
            self._stop.wait(0.2)
        self._drain(targets)

    def _ended(self, lineage_id: str) -> bool:
        if not self.services.jobs.get(lineage_id).status.is_terminal():
            return False
        ending = self.runtime.store.endings.get(lineage_id)  # its announcement queued, or nothing left to do
        return ending is None or ending.settled_at is not None or ending.done(ANNOUNCE)

    def _drain(self, lineage_ids: list[str]) -> None:
        """Until every message about these lineages is shown, and their cards redrawn after them (a delivery
        asks for the redraw, which follows it in the same pass: the script's last lines come after the card's),
        DRAIN_SECONDS at most: a message a chat keeps refusing is the outbox's to retry, not the script's to
        wait for."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline and (self.runtime.store.outbox.undelivered(lineage_ids)
                                               or self._cards_waiting(lineage_ids)):
            self._stop.wait(0.2)

    def _cards_waiting(self, lineage_ids: list[str]) -> bool:
        wanted = set(lineage_ids)
        waiting = CardRedraws(self.runtime.store, self.runtime.clock).waiting()
        return any(redraw.lineage_id in wanted for redraw in waiting)

    def exit_code(self) -> int:
        lineages = self.session()
        failed = [lineage.id for lineage in lineages if lineage.status in _FAILED]
        ended = ", ".join(f"{lineage.id} {lineage.status.value.replace('_', ' ')}" for lineage in lineages) \
            or "no jobs launched"
        self.chat.say(f"script done: {ended}")
        if failed:
            self.chat.say(f"failed: {', '.join(failed)}")
            return 1
        return 0

    def _say_still_running(self) -> None:
        running = [lineage.id for lineage in self.runtime.store.list_lineages(active_only=True)]
        if running:
            self.chat.say(f"{', '.join(running)} still running: local jobs keep training; "
                          "`trainbot console` picks them up again.")


def _unknown(line: str, labels: list[str]) -> str:
    pressable = f" Buttons you can press now: {', '.join(labels)}." if labels else ""
    return f"Unknown input `{line}`: type a /command, a button label, or help.{pressable}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


def _line_editing() -> None:
    """Arrow keys and history at the prompt, where the platform has readline."""
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (importing it is what turns it on for input())


def _utf8(stream: TextIO) -> TextIO:
    # Cards use box-drawing characters: never let a narrow terminal encoding turn them into a traceback.
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="replace")
    return stream
