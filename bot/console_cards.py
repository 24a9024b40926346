"""The cards a person can press in the console, and which one a typed button word presses.

A bare word (`launch`) presses only the newest card, the one drawn last with buttons: it is the card the
person is looking at. When that card no longer has the button (it was cancelled, launched, or its job moved
on), the word presses nothing and says so; an older card is pressed by naming it, with the short handle
its button line shows (`launch c2`) or its job (`stop bert-squad-1a2b`). Slack has no such question: a
click lands on the card it was made on. Here a typed word must not land on a card the person has
forgotten (issue 35: `launch` after `cancel` launched an older, dearer plan).
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field

#: The most older cards a refusal names as the ones that have the button.
OLDER_SHOWN = 3


@dataclass(frozen=True)
class ConsoleButton:
    label: str
    action_id: str
    value: str
    confirm: str | None  # the question Slack would ask before pressing, if any


@dataclass
class Card:
    key: str  # the message's ts, or "e<N>" for an ephemeral reply
    handle: str  # "c3": what the card's button line shows, to name it
    title: str
    buttons: list[ConsoleButton]
    ephemeral: bool
    answered_by: str | None = None  # the label whose press answered it (its buttons are gone)
    ever: set[str] = field(default_factory=set)  # every label it has shown, lowercased

    def names(self) -> set[str]:
        """What names this card when typed after a button word: its handle, its title (a job's id), and
        the jobs and endpoints its buttons act on."""
        found = {self.handle, self.title}
        for button in self.buttons:
            found |= _value_names(button.value)
        return {name for name in found if name}


@dataclass(frozen=True)
class Press:
    card: Card
    button: ConsoleButton


@dataclass(frozen=True)
class NotPressed:
    sentence: str


@dataclass
class CardDeck:
    """Every card drawn in this session, in the order each first showed buttons (thread-safe)."""

    _cards: dict[str, Card] = field(default_factory=dict)
    _born: list[str] = field(default_factory=list)
    _counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, key: str, title: str, buttons: list[ConsoleButton], *, ephemeral: bool) -> str | None:
        """Record a card's buttons as drawn now; its handle (None for a message that never had buttons).
        A card keeps its place and handle when it is redrawn: only a new card becomes the newest."""
        with self._lock:
            card = self._cards.get(key)
            if card is None:
                if not buttons:
                    return None
                card = Card(key, f"c{next(self._counter)}", title, [], ephemeral)
                self._cards[key] = card
                self._born.append(key)
            card.title, card.buttons = title, list(buttons)
            card.ever |= {button.label.lower() for button in buttons}
            return card.handle

    def handle_of(self, key: str) -> str | None:
        with self._lock:
            card = self._cards.get(key)
            return card.handle if card else None

    def retire(self, key: str, *, answered_by: str | None = None) -> None:
        """Its buttons can no longer be pressed (the card was answered or replaced)."""
        with self._lock:
            card = self._cards.get(key)
            if card is not None:
                card.buttons = []
                card.answered_by = answered_by or card.answered_by

    def newest(self) -> Card | None:
        with self._lock:
            return self._cards[self._born[-1]] if self._born else None

    def labels(self) -> list[str]:
        """The labels the newest card can be pressed by now."""
        card = self.newest()
        return [button.label.lower() for button in card.buttons] if card else []

    def find(self, label: str, target: str = "") -> Press | NotPressed | None:
        """The press ``label`` (and ``target``, when given) asks for; NotPressed with the reason when there is
        a card it could have meant but none it may press; None when no card ever had such a button."""
        wanted = label.strip().lower()
        with self._lock:
            cards = [self._cards[key] for key in reversed(self._born)]
        having = [card for card in cards if _button(card, wanted) is not None]
        if not target:
            return _newest_press(cards, having, wanted)
        named = next((card for card in cards if target in card.names() or target.lower() == card.handle), None)
        if named is None:
            if not having and not any(wanted in _labels_ever(card) for card in cards):
                return None
            return NotPressed(f"No card is named `{target}`: name a card by its handle (as `c2`) or its job."
                              + _older_hint(having, wanted))
        button = _button(named, wanted)
        if button is None:
            return NotPressed(_lacks(named, wanted) + _older_hint([c for c in having if c is not named], wanted))
        return Press(named, button)


def _newest_press(cards: list[Card], having: list[Card], wanted: str) -> Press | NotPressed | None:
    if not cards or (not having and not any(wanted in _labels_ever(card) for card in cards)):
        return None
    newest = cards[0]
    button = _button(newest, wanted)
    if button is not None:
        return Press(newest, button)
    return NotPressed(_lacks(newest, wanted, newest=True) + _older_hint(having, wanted))


def _lacks(card: Card, wanted: str, *, newest: bool = False) -> str:
    which = f"The newest card ({card.title}, {card.handle})" if newest else f"Card {card.handle} ({card.title})"
    if card.answered_by:
        return f"{which} was answered with {card.answered_by}, so its buttons are gone: nothing was pressed."
    return f"{which} has no {wanted.capitalize()} button now: nothing was pressed."


def _older_hint(having: list[Card], wanted: str) -> str:
    if not having:
        return ""
    named = "; ".join(f"`{wanted} {card.handle}` ({card.title})" for card in having[:OLDER_SHOWN])
    return f" An older card has one: name it to press it, e.g. {named}."


def _button(card: Card, wanted: str) -> ConsoleButton | None:
    return next((button for button in card.buttons if button.label.lower() == wanted), None)


def _labels_ever(card: Card) -> set[str]:
    return card.ever


def _value_names(value: str) -> set[str]:
    """A Stop or Deploy button's value is the job's id; a Promote or Rollback button's is JSON naming the job
    and the endpoint."""
    if not value.startswith("{"):
        return {value}
    try:
        fields = json.loads(value)
    except ValueError:
        return set()
    if not isinstance(fields, dict):
        return set()
    return {str(fields[key]) for key in ("job", "endpoint") if isinstance(fields.get(key), str)}
