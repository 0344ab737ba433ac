"""What a method asks a person while it runs: one :class:`Ask` per kind of question, declared with the method.

A method whose graph pauses for a person (LangGraph ``interrupt(payload)``, resumed with
``Command(resume=reply)``) declares each question it may ask in :attr:`~pictrieve.agents.method.Method.asks`, as
it declares its steps: the payload it pauses with and the reply it takes back, both TypedDicts named
``"module:Class"``. Every front end reads the declaration and never the method: the page's generic tab, MCP's
``start_method`` / ``answer_method`` and ``pictrieve search --method`` show the question, its choices and the items
shown with it, and read a reply of the declared shape (the runner is :class:`pictrieve.graphs.sessions.MethodSessions`).

The payload's fields a front end reads: ``question`` (the text shown; required), ``kind`` (which :class:`Ask`, when a
method asks more than one kind of question), ``options`` (choices for the reply's first text field, optional) and
the field :attr:`Ask.shows` names (the items shown with the question: photos as hits, NEEDLE's guide pictures; each
with an ``id``). The reply's fields, as a generic front end asks for them: ``str`` (a line of text, at most
:data:`~pictrieve.agents.settings.MAX_TEXT` characters), ``bool`` (yes or no), a ``Literal`` (one of its choices)
and ``list[str]`` (ids among the shown items). :meth:`Ask.read_reply` checks a reply against that shape before a
session is resumed, so a front end never hands a method what it did not declare.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pictrieve.agents.settings import MAX_TEXT
from pictrieve.errors import PictrieveError

MAX_PICKS = 100
"""Most ids one reply field may list (a front end shows at most a page of items)."""


class ReplyError(PictrieveError, ValueError):
    """A reply that does not have the shape the question declared (one line saying what to send)."""


@dataclass(frozen=True)
class Ask:
    """One kind of question a method asks a person, and the reply it takes (module docstring)."""

    question: str | type
    """``"module:Class"`` (or the class): the TypedDict the method pauses with; its ``question`` is the text shown."""
    reply: str | type
    """``"module:Class"`` (or the class): the TypedDict of the reply, the ``Command(resume=...)`` value."""
    kind: str = ""
    """The payload's ``kind`` when the method asks more than one kind of question (NEEDLE: guides, results)."""
    shows: str = ""
    """The payload field holding the items shown with the question (each with an ``id``); a reply's ``list[str]``
    fields pick among them."""

    def question_class(self) -> type:
        from pictrieve.agents.method import load_target

        return load_target(self.question)

    def reply_class(self) -> type:
        from pictrieve.agents.method import load_target

        return load_target(self.reply)

    def reply_fields(self) -> list[dict[str, Any]]:
        """The reply's fields (:func:`~pictrieve.agents.settings.describe_fields`), each with ``picks`` (a list of
        ids among the shown items) and ``choices`` (a ``Literal``'s)."""
        from pictrieve.agents.settings import describe_fields

        hints = typing.get_type_hints(self.reply_class())
        return [{**record, "picks": bool(self.shows) and _is_id_list(hints.get(record["name"]))}
                for record in describe_fields(self.reply_class())]

    def describe(self) -> dict[str, Any]:
        """``kind``, ``shows``, ``question`` and ``reply`` (their fields), as JSON (``pictrieve methods --json``)."""
        from pictrieve.agents.settings import describe_fields

        return {"kind": self.kind, "shows": self.shows, "question": describe_fields(self.question_class()),
                "reply": self.reply_fields()}

    def shown(self, payload: Mapping[str, Any]) -> list[Any]:
        """The items shown with the question (``payload[shows]``), as the payload has them."""
        return list(payload.get(self.shows) or []) if self.shows else []

    def read_reply(self, reply: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``reply`` checked against the declared shape, as the method receives it: a JSON object of the reply's
        fields only, the required ones present, each of its type; text at most ``MAX_TEXT`` characters; id lists
        at most :data:`MAX_PICKS` ids, each an id of an item shown with the question. :class:`ReplyError` (one
        line) otherwise."""
        from pydantic import TypeAdapter, ValidationError

        fields_ = {record["name"]: record for record in self.reply_fields()}
        if not isinstance(reply, Mapping):
            raise ReplyError(f"reply with a JSON object of {_shape(fields_)}")
        unknown = sorted(str(key) for key in reply if key not in fields_)
        if unknown:
            raise ReplyError(f"this question takes no {', '.join(unknown)[:200]} in its reply; "
                             f"it takes {_shape(fields_)}")
        missing = [name for name, record in fields_.items() if record["required"] and name not in reply]
        if missing:
            raise ReplyError(f"the reply needs {', '.join(missing)}; it takes {_shape(fields_)}")
        for name, value in reply.items():
            texts = value if isinstance(value, list) else [value]
            if isinstance(value, list) and len(value) > MAX_PICKS:
                raise ReplyError(f"{name}: at most {MAX_PICKS} items")
            if any(isinstance(text, str) and len(text) > MAX_TEXT for text in texts):
                raise ReplyError(f"{name}: at most {MAX_TEXT} characters")
        try:
            checked = dict(TypeAdapter(self.reply_class()).validate_python(dict(reply), strict=True))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or "reply"
            raise ReplyError(f"{where}: {first['msg']}") from None
        shown = {str(_item_id(item)) for item in self.shown(payload)}
        for name, record in fields_.items():
            if record["picks"] and name in checked:
                stray = sorted(set(checked[name]) - shown)
                if stray:
                    raise ReplyError(f"{name}: unknown id(s) {', '.join(stray)[:200]}; choose among the "
                                     f"{len(shown)} shown")
                checked[name] = list(dict.fromkeys(checked[name]))
        return checked


def ask_for(asks: Sequence[Ask], payload: Any, method: str) -> Ask:
    """The :class:`Ask` a pause's ``payload`` answers to (by its ``kind``; the only one when a method declares one).
    A pause the method did not declare is a :class:`~pictrieve.errors.PictrieveError` naming it: no front end can
    show a question whose shape nobody said."""
    kind = str(payload.get("kind") or "") if isinstance(payload, Mapping) else ""
    for ask in asks:
        if ask.kind == kind or len(asks) == 1 and not ask.kind:
            if not isinstance(payload, Mapping) or not str(payload.get("question") or "").strip():
                raise PictrieveError(f"method {method} paused with no question text (its payload needs 'question')")
            return ask
    declared = ", ".join(repr(a.kind) for a in asks) or "none"
    raise PictrieveError(f"method {method} paused with a question it does not declare (kind {kind!r}; declared: "
                         f"{declared}); give it an Ask in its Method's asks")


def _is_id_list(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        hint = typing.get_args(hint)[0]
    return typing.get_origin(hint) is list and typing.get_args(hint) == (str,)


def _item_id(item: Any) -> Any:
    return item.get("id") if isinstance(item, Mapping) else getattr(item, "id", item)


def _shape(fields_: Mapping[str, Mapping[str, Any]]) -> str:
    return "{" + ", ".join(f"{name}: {record['type']}" for name, record in fields_.items()) + "}"
