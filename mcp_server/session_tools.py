"""The MCP session tools: methods that ask the person questions while they run.

- ``start_method`` / ``answer_method``: any registered method that declares what it asks
  (:attr:`~pictrieve.agents.method.Method.asks`: PlugIR, NEEDLE, an installed plugin), run by the one session
  runner every front end uses (:class:`~pictrieve.graphs.sessions.MethodSessions`) and shown by its generic view:
  the question, its choices, what is shown with it and the fields of the reply; a reply is checked against the
  declared shape before the method reads it. Nothing here names a method.
- ``find_photo`` / ``answer_question``: PlugIR's own view (:mod:`.sessions`) of sessions run by the same runner,
  with its rounds, its pick (``found N``) and, with ``ask_person`` and a client that supports MCP elicitation, the
  questions put to the person directly.
"""

from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, Field, ValidationError

from pictrieve.agents.settings import MAX_TEXT
from pictrieve.mcp_server.calls import Text, in_thread, result
from pictrieve.mcp_server.schemas import MethodSession, PhotoSession
from pictrieve.mcp_server.service import PictrieveService
from pictrieve.vectorstore.hits import hit_json

if TYPE_CHECKING:
    from pictrieve.mcp_server.server import PictrieveMCP


def session_result(view: dict[str, Any]) -> CallToolResult:
    """A session's result from its view (:func:`~pictrieve.mcp_server.sessions.photo_view`): the pending
    question and how to answer it, or the outcome, then the photos shown."""
    shown = view["results"]
    structured = PhotoSession(
        session=view["session"], done=view["done"], round=view["round"], question=view["question"],
        options=view["options"], query=view["query"], results=[hit_json(h) for h in shown],
        found=hit_json(view["found"]) if view.get("found") is not None else None, note=view.get("note", ""))
    if view["done"]:
        line = "The session has ended: " + (f"the photo is {view['found'].id}." if view.get("found") is not None
                                            else "these are the final results.")
    else:
        options = f" (options: {', '.join(view['options'])})" if view["options"] else ""
        line = (f"Question {view['round']}: {view['question']}{options}\nAnswer it with answer_question("
                f"session='{view['session']}', answer=...): your answer, 'found N' when photo N is the one, or 'stop'.")
    return result(structured, shown, line + (f"\nNote: {view['note']}" if view.get("note") else ""))


def method_session_result(run: Any) -> CallToolResult:
    """A ``start_method`` / ``answer_method`` result from the session's generic view
    (:meth:`~pictrieve.graphs.sessions.MethodRun.to_json`): the question and how to answer it, or what the method
    found, then the photos (those shown with the question, or the results)."""
    view = run.to_json()
    pending = run.pending
    photos = [h for h in (pending.shown_hits() if pending is not None else run.hits)]
    structured = MethodSession(session=view["session"], method=view["method"], done=view["done"],
                               question=view["question"], hits=[hit_json(h) for h in run.hits], output=view["output"])
    if pending is None:
        line = (f"{run.method} has finished: {len(run.hits)} photos." if run.done else
                f"{run.method} stopped between steps; start it again with start_method.")
    else:
        fields = ", ".join(f"{f['name']}: {'ids of the shown items' if f['picks'] else f['type']}"
                           + ("" if f["required"] else " (optional)") for f in view["question"]["reply"])
        options = f" (options: {', '.join(pending.options)})" if pending.options else ""
        line = (f"{run.method} asks: {pending.question}{options}\nAnswer it with answer_method(session="
                f"'{run.session}', reply={{{fields}}}).")
    return result(structured, photos, line)


class PersonAnswer(BaseModel):
    """What the person answers to one of find_photo's questions (MCP elicitation)."""

    answer: Text = Field(description="Your answer; or 'found N' when photo N is the one; or 'stop' to end")


def add_session_tools(server: "PictrieveMCP", service: PictrieveService) -> None:
    """Register ``start_method``, ``answer_method``, ``find_photo`` and ``answer_question`` over ``service``."""
    add_method_session_tools(server, service)

    @server.tool(name="find_photo", title="Find one photo by answering questions (PlugIR)")
    async def find_photo(
        ctx: Context,
        description: Annotated[Text, Field(description="What the user remembers of the photo, e.g. 'a dog in the "
                                                      "snow'")],
        ask_person: Annotated[bool, Field(description="Ask the person the questions directly in the client, when "
                                                      "it supports that (MCP elicitation); otherwise answer them "
                                                      "with answer_question")] = False,
    ) -> Annotated[CallToolResult, PhotoSession]:
        """Start finding one particular photo: searches with the description and asks a question whose answer
        best narrows the photos down. Returns a session id, the question and the current best photos. Answer
        with answer_question(session, answer) until the photo shows up ('found N' picks photo N)."""
        view = await in_thread(ctx, service.find_photo, description, first="find_photo: starting a session")
        if ask_person and _client_elicits(ctx):
            view = await _ask_person(ctx, service, view)
        elif ask_person:
            view["note"] = "this client cannot ask the person directly: answer with answer_question"
        return session_result(view)

    @server.tool(name="answer_question", title="Answer find_photo's question")
    async def answer_question(
        ctx: Context,
        session: Annotated[Text, Field(description="The session id find_photo returned")],
        answer: Annotated[Text, Field(description="The answer to the pending question; or 'found N' when photo N of "
                                                 "the last results is the one; or 'stop' to end")],
    ) -> Annotated[CallToolResult, PhotoSession]:
        """Answer the pending question of a find_photo session. Returns the next question and the current best
        photos, or, when the session ends, the final results."""
        view = await in_thread(ctx, service.answer_question, session, answer, first="answer_question: reading the answer")
        return session_result(view)


def _client_elicits(ctx: Context) -> bool:
    from mcp.types import ClientCapabilities, ElicitationCapability

    try:
        return ctx.session.check_client_capability(ClientCapabilities(elicitation=ElicitationCapability()))
    except Exception:  # no session (not in a request)
        return False


async def _ask_person(ctx: Context, service: PictrieveService, view: dict[str, Any]) -> dict[str, Any]:
    """Ask the person each question through the client until the session ends; a declined or cancelled
    question leaves the session to answer_question."""
    while not view["done"]:
        photos = "\n".join(f"  {n}. {h.caption or h.path.rsplit('/', 1)[-1]}" for n, h in enumerate(view["results"], 1))
        options = f" ({' / '.join(view['options'])})" if view["options"] else ""
        message = (f"Finding your photo of {view['query'] or 'it'}. The best photos now:\n{photos}\n\n"
                   f"{view['question']}{options}")
        try:
            asked = await ctx.elicit(message=message, schema=PersonAnswer)
        except ValidationError:  # not a text, or past MAX_TEXT (the form says maxLength; a client may not keep it)
            return {**view, "note": f"the person's answer was not a text of at most {MAX_TEXT} characters and was "
                                    "not read; answer with answer_question, or ask them yourself"}
        if asked.action != "accept" or not asked.data.answer.strip():
            return {**view, "note": f"the person {'declined' if asked.action == 'decline' else 'did not answer'}; "
                                    "answer with answer_question, or ask them yourself"}
        view = await in_thread(ctx, service.answer_question, view["session"], asked.data.answer,
                               first="answer_question: reading the answer")
    return view


def add_method_session_tools(server: "PictrieveMCP", service: PictrieveService) -> None:
    """Register ``start_method`` and ``answer_method``: every method that declares what it asks, plugins included
    (the enum is the registry's when the server starts)."""
    AskingMethod = Literal[tuple(service.asking_methods())]  # type: ignore[valid-type]

    @server.tool(name="start_method", title="Run a method that asks the person questions")
    async def start_method(
        ctx: Context,
        method: Annotated[AskingMethod, Field(description="The method: one that asks the person questions while it "
                                                          "runs (a registered method that declares them)")],
        text: Annotated[Text, Field(description="What it starts from (its text input: a query or a description)")],
        settings: Annotated[dict[str, Text | int | float | bool] | None, Field(
            description="Its run settings by name (text or JSON values; default: its own)")] = None,
    ) -> Annotated[CallToolResult, MethodSession]:
        """Start a method that asks the person questions while it runs. Returns a session id and the method's
        question (its text, choices, the items shown with it and the fields of the reply), or, when it asks
        nothing, its results. Put the question to the person, then answer with answer_method(session, reply)
        until it has finished."""
        run = await in_thread(ctx, service.start_method, method, text, settings,
                              first=f"start_method: starting {method}")
        return method_session_result(run)

    @server.tool(name="answer_method", title="Answer a method's question")
    async def answer_method(
        ctx: Context,
        session: Annotated[Text, Field(description="The session id start_method returned")],
        reply: Annotated[dict[str, Any], Field(description="The person's reply: the fields the question's `reply` "
                                                           "lists, e.g. {\"answer\": \"yes\"} or {\"irrelevant\": "
                                                           "[ids]}")],
    ) -> Annotated[CallToolResult, MethodSession]:
        """Answer the question a start_method session waits on. Returns the next question, or, when the method
        has finished, its results."""
        run = await in_thread(ctx, service.answer_method, session, reply, first="answer_method: reading the reply")
        return method_session_result(run)
