"""The need registry (:mod:`pictrieve.agents.needs`): one resolver per need, a method's own needs, and the
operator rule a server's callers meet, all in one place that every front end calls."""

from __future__ import annotations

import pytest
from pictrieve.agents.method import Method, MethodDefinitionError
from pictrieve.agents.needs import (
    NEEDS,
    MissingNeedError,
    Need,
    NeedContext,
    NeedDefinitionError,
    NeedNotAllowed,
    check_caller_choices,
    choosable,
    missing_needs,
    names_of,
    operator_only,
    resolve_needs,
    unmet_needs,
)

SCHEMAS = {"builder": "x:y", "settings": "x:y", "input_schema": "x:y", "output_schema": "x:y"}


def labeller(value, context):
    """A plugin's own resolver: a name becomes an object, built once through the front end's cache."""
    return context.make(("label", value), lambda: {"label": value, "gallery": context.gallery})


LABEL = Need("label", "the words the toy puts before its note", labeller, env_var="TOY_LABEL",
             cli_option="--label", config_key="label", default="toy")


def method(*needs, optional=()):
    return Method(name="m", description="a method", needs=needs, optional=optional, **SCHEMAS)


def test_every_house_need_carries_its_resolver_and_where_an_operator_sets_it():
    for need in NEEDS.values():
        assert need.description
        if need.brought_by_caller:  # the checkpointer: every front end brings its own
            assert need.name == "checkpointer"
            continue
        assert need.env_var and need.env_var.startswith("PICTRIEVE_") and need.cli_option.startswith("--")
        if need.endpoint is not None:  # an endpoint is never a caller's
            assert need.endpoint.key in operator_only([need])


def test_a_method_declares_a_need_of_its_own_with_its_resolver():
    m = method("llm", LABEL, "checkpointer")
    assert m.needs == ("llm", "label", "checkpointer") and m.own_needs == (LABEL,)
    assert [n.name for n in m.need_specs()] == ["llm", "label", "checkpointer"]
    made = {}
    kwargs = resolve_needs(m, {"label": "mine"}, gallery="G", make=lambda key, f: made.setdefault(key, f()))
    assert kwargs["label"] == {"label": "mine", "gallery": "G"} and ("label", "mine") in made
    assert "checkpointer" not in kwargs  # brought by the caller


@pytest.mark.parametrize("needs, words", [
    (("llm", Need("llm", "another chat model", labeller)), "take the name of one of the house's needs"),
    ((Need("label", "no resolver"),), "give each need of its own a resolver"),
    (("nothing_like_it",), "unknown need"),
    (("llm", "llm"), "listed twice"),
])
def test_a_method_breaking_the_need_contract_is_refused_in_one_line(needs, words):
    with pytest.raises(MethodDefinitionError, match=words):
        method(*needs)


def test_an_optional_need_must_be_one_of_its_needs():
    with pytest.raises(MethodDefinitionError, match="not among its needs"):
        method("visualizers", optional=("llm",))


@pytest.mark.parametrize("kwargs, words", [
    ({"name": "Label"}, "lower-case"), ({"description": " "}, "description"),
    ({"cli_option": "-l"}, "no option"), ({"resolve": 3}, "resolve must be"),
])
def test_a_malformed_need_is_refused(kwargs, words):
    with pytest.raises(NeedDefinitionError, match=words):
        Need(**{"name": "label", "description": "d", "resolve": labeller, **kwargs})


def test_values_come_from_the_caller_then_the_environment_then_the_default():
    m = method(LABEL)
    assert resolve_needs(m, {"label": "given"}, environ={"TOY_LABEL": "env"})["label"]["label"] == "given"
    assert resolve_needs(m, {}, environ={"TOY_LABEL": "env"})["label"]["label"] == "env"
    assert resolve_needs(m, {}, environ={})["label"]["label"] == "toy"
    assert resolve_needs(m, {}, defaults=False)["label"]["label"] is None  # the builder's own default
    # The environment is read only when a front end passes it (a server reads its operator's).
    assert resolve_needs(m, {})["label"]["label"] == "toy"


def test_a_many_need_takes_names_separated_by_commas_a_list_or_one_object():
    assert names_of("a, b,,c") == ["a", "b", "c"] and names_of(["a", ""]) == ["a"] and names_of(None) == []
    thing = object()
    assert names_of(thing) == [thing]
    need = Need("parts", "parts", lambda value, context: f"made {value}", many=True)
    assert need.build("a,b", NeedContext()) == ["made a", "made b"]


def test_a_required_need_nobody_gave_says_how_to_give_it():
    m = Method(name="vis", description="d", needs=("visualizers",), **SCHEMAS)
    assert missing_needs(m, {}) == [NEEDS["visualizers"]] and not missing_needs(m, {"visualizers": "exemplar:x"})
    with pytest.raises(MissingNeedError, match=r"vis needs what makes guide images.*--visualizer exemplar:DIR"):
        resolve_needs(m, {"visualizers": []})


def test_an_optional_need_is_given_only_when_someone_chose_one():
    m = method("llm", optional=("llm",))
    assert resolve_needs(m, {}) == {} and resolve_needs(m, {"llm": "offline"}) == {}
    model = object()
    assert resolve_needs(m, {"llm": model}) == {"llm": model}  # a ready model is a choice


def test_the_offline_chat_model_is_no_choice_even_as_an_object_and_its_words_are_never_shown():
    """`pictrieve ui` passes the offline SmolLM2-135M as a model object: an optional need (VisRet's rewriter) gets
    nothing from it, as from the name, and :func:`may_show` says no for it however it comes (issue 37)."""
    from pictrieve.agents.shown_text import may_show
    from pictrieve.tools.models.chat_models import create_chat_model

    m = method("llm", optional=("llm",))
    offline = create_chat_model("offline")  # the wrapper only: no weights load
    assert resolve_needs(m, {"llm": offline}) == {} and resolve_needs(m, {"llm": offline.bind(stop=["."])}) == {}
    assert not any(may_show(chat) for chat in ("offline", offline, offline.with_retry(), None))
    capable = object()
    assert may_show(capable) and may_show("openai:gpt-4o-mini")
    assert resolve_needs(method("llm"), {"llm": offline}) == {"llm": offline}  # a required one still gets it


def test_the_qc2_model_is_the_one_trained_for_the_gallery_and_needs_one():
    from pictrieve.agents.needs import NeedUnavailable

    with pytest.raises(NeedUnavailable, match="trained for a gallery"):
        NEEDS["qc2_model"].build(None, NeedContext(gallery=None))


def test_a_method_whose_model_was_never_trained_is_not_offered(tmp_path, tiny_clip_name, photo_folder):
    """MCP's gallery_info lists only the methods whose needs can be met: no QC2 model trained for the gallery,
    no qc2 (it listed qc2, and search_images(method="qc2") then failed); asking for it says how to train one."""
    from pathlib import Path

    from pictrieve.graphs.registry import get_method
    from pictrieve.mcp_server.service import PictrieveService, ServerSettings, ToolInputError
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(tmp_path / "g", tiny_clip_name)
    gallery.add(photo_folder, progress=False)
    ((need, why),) = unmet_needs(get_method("qc2"), {}, gallery=gallery)
    assert need.name == "qc2_model" and "`pictrieve quality train --gallery GALLERY`" in why
    assert unmet_needs(get_method("search"), {}, gallery=gallery) == []
    service = PictrieveService(gallery, ServerSettings(state_dir=tmp_path / "state"))
    offered = service.info()["search_methods"]
    assert "search" in offered and "qc2" not in offered
    with pytest.raises(ToolInputError, match="qc2 cannot run here: no QC2 model has been trained for this gallery"):
        service.graph("qc2")
    (Path(gallery.location) / "qc2").mkdir()
    (Path(gallery.location) / "qc2" / "qc2.json").write_text("{}")  # a saved model's file: now it can be tried
    assert unmet_needs(get_method("qc2"), {}, gallery=gallery) == [] and "qc2" in service.info()["search_methods"]


# --- the operator rule: a caller chooses inputs, never where the server reaches or what it reads --------------


def test_a_caller_cannot_name_an_endpoint_or_a_folder_other_than_the_operators():
    needs = list(NEEDS.values())
    environ = {"PICTRIEVE_BASE_URL": "http://127.0.0.1:9/v1"}
    check_caller_choices({"base_url": "http://127.0.0.1:9/v1"}, needs, environ=environ, allowed={})  # its own: fine
    for key in ("base_url", "vlm_base_url", "qc2_model"):
        with pytest.raises(NeedNotAllowed, match=f"configurable.{key} is chosen by the server's operator"):
            check_caller_choices({key: "http://127.0.0.1:8/elsewhere"}, needs, environ=environ, allowed={})


def test_a_caller_chooses_only_among_what_the_operator_allowed():
    needs = list(NEEDS.values())
    assert set(choosable(needs)) == {"llm", "visualizer", "captioner", "vlm", "detector", "search"}
    check_caller_choices({"llm": "offline"}, needs, environ={}, allowed={})  # the default is the operator's own
    with pytest.raises(NeedNotAllowed, match=r"configurable.llm='openai:x' is not allowed .*--allow llm="):
        check_caller_choices({"llm": "openai:x"}, needs, environ={}, allowed={})
    check_caller_choices({"llm": "openai:x"}, needs, environ={}, allowed={"llm": ["openai:x"]})
    with pytest.raises(NeedNotAllowed, match="visualizer"):  # each of several names must be allowed
        check_caller_choices({"visualizer": "exemplar:a,exemplar:b"}, needs, environ={},
                             allowed={"visualizer": ["exemplar:a"]})
    with pytest.raises(NeedNotAllowed):  # not a string: refused, whatever it is
        check_caller_choices({"llm": ["offline"]}, needs, environ={}, allowed={})


def test_a_plugins_own_need_meets_the_same_rule():
    folder = Need("weights", "a folder of weights", labeller, env_var="TOY_WEIGHTS", cli_option="--weights")
    with pytest.raises(NeedNotAllowed, match="configurable.weights is chosen by the server's operator"):
        check_caller_choices({"weights": "/etc"}, [folder], environ={"TOY_WEIGHTS": "/srv/w"}, allowed={})
    with pytest.raises(NeedNotAllowed, match="configurable.label"):
        check_caller_choices({"label": "other"}, [LABEL], environ={}, allowed={})
    check_caller_choices({"label": "toy"}, [LABEL], environ={}, allowed={})


# --- the front ends loop over the registry: a plugin's own need reaches each of them ---------------------------


@pytest.fixture
def labelled():
    """A method, registered in this process, declaring a need of its own (and the house's chat model)."""
    from pictrieve.graphs.registry import register_method, unregister_method

    m = Method(name="labelled", description="a method with a need of its own", needs=("llm", LABEL), **SCHEMAS)
    register_method(m)
    yield m
    unregister_method("labelled")


def test_the_langgraph_server_resolves_a_plugins_own_need_under_the_operator_rule(labelled, monkeypatch):
    from pictrieve.graphs import serving

    monkeypatch.delenv(serving.ENV_ALLOW, raising=False)
    monkeypatch.setenv("TOY_LABEL", "operator's")
    assert "label" in serving.choosable_settings() and "label" not in serving.CHOOSABLE
    assert serving.served_needs_of(labelled, None, "G")["label"] == {"label": "operator's", "gallery": "G"}
    with pytest.raises(serving.ServingConfigError, match="configurable.label='callers' is not allowed"):
        serving.check_run_settings({"configurable": {"label": "callers"}})
    monkeypatch.setenv(serving.ENV_ALLOW, '{"label": ["callers"]}')
    serving.check_run_settings({"configurable": {"label": "callers"}})
    assert serving.served_needs_of(labelled, {"configurable": {"label": "callers"}}, "G")["label"]["label"] == "callers"


def test_the_command_line_gives_a_plugins_own_need_with_need_and_refuses_what_does_not_apply(labelled):
    import click
    from pictrieve.cli.method_search import _needs
    from pictrieve.cli.need_options import given_needs

    given = given_needs({"llm": None, "visualizers": (), "qc2_model": None}, ("label=mine",))
    assert given == {"label": "mine"}
    assert _needs(labelled, given, "G")["label"] == {"label": "mine", "gallery": "G"}
    with pytest.raises(click.UsageError, match=r"--visualizer does not apply to --method labelled \(its needs: llm, label\)"):
        _needs(labelled, given_needs({"visualizers": ("exemplar:x",)}, ()), "G")
    with pytest.raises(click.UsageError, match="--base-url needs --llm"):
        _needs(labelled, {"base_url": "http://127.0.0.1:9/v1"}, "G")
    with pytest.raises(click.UsageError, match="--need takes NAME=VALUE"):
        given_needs({}, ("label",))


def test_the_server_commands_take_a_plugins_own_need_by_name(labelled):
    import click
    from pictrieve.cli.need_options import parse_needs
    from pictrieve.mcp_server.service import ServerSettings

    assert parse_needs(("label=mine",)) == {"label": "mine"}
    with pytest.raises(click.UsageError, match="--need lable: no registered method needs it; known needs: .*label"):
        parse_needs(("lable=mine",))
    with pytest.raises(click.UsageError, match="--need checkpointer"):  # brought by the front end, never given
        parse_needs(("checkpointer=x",))
    settings = ServerSettings(state_dir="s", needs={"llm": "openai:m", "base_url": "http://127.0.0.1:9/v1",
                                                    "visualizers": "exemplar:d", "label": "mine"})
    given = settings.given_needs()  # the MCP server's options, by need name, for the need registry
    assert given["llm"] == "openai:m" and given["base_url"] == "http://127.0.0.1:9/v1"
    assert given["visualizers"] == "exemplar:d" and given["label"] == "mine" and settings.need_value("captioner") == "auto"
    assert resolve_needs(labelled, given, gallery="G", defaults=False)["label"]["label"] == "mine"


def test_pictrieve_serve_gives_a_plugins_own_need_and_lets_runs_choose_it_only_when_allowed(labelled, tmp_path):
    import json

    from click.testing import CliRunner
    from pictrieve.cli.serve import need_variables, serve

    assert need_variables({"visualizers": ["exemplar:a", "exemplar:b"], "base_url": "http://127.0.0.1:9/v1"}) == {
        "PICTRIEVE_VISUALIZER": "exemplar:a,exemplar:b", "PICTRIEVE_BASE_URL": "http://127.0.0.1:9/v1"}
    path = tmp_path / "langgraph.json"
    done = CliRunner().invoke(serve, ["--write-config", str(path), "--need", "label=mine", "--allow", "label=a,b"])
    assert done.exit_code == 0, done.output
    env = json.loads(path.read_text())["env"]
    assert env["TOY_LABEL"] == "mine" and json.loads(env["PICTRIEVE_SERVE_ALLOW"]) == {"label": ["a", "b"]}
    refused = CliRunner().invoke(serve, ["--write-config", str(path), "--allow", "base_url=http://127.0.0.1:9"])
    assert refused.exit_code == 2 and "never chosen by a run" in refused.output


# --- two needs must never share a name or a configurable key: a run's choice is checked under one rule ---------


@pytest.mark.parametrize("config_key, words", [
    ("llm", "takes configurable.llm, the key of need 'llm'"),
    ("embedder", "takes configurable.embedder, which the server reads itself"),
])
def test_an_own_need_taking_a_house_key_is_refused(config_key, words):
    stolen = Need("label", "a label", labeller, env_var="TOY_LABEL", cli_option="--label", config_key=config_key)
    with pytest.raises(MethodDefinitionError, match=words):
        method(stolen)


def test_two_methods_declaring_clashing_needs_cannot_both_be_registered(labelled):
    """One name for two different needs, or one config key for two needs: the second method is refused at
    registration, so the server never reads a ``configurable`` key that only the other need's rule checked."""
    from pictrieve.graphs.registry import available_methods, register_method, unregister_method
    from pictrieve.graphs.serving import served_needs

    other_key = Need("label", "another label", labeller, env_var="TOY_LABEL2", cli_option="--label2",
                     config_key="label_unchecked")
    same_key = Need("tag", "a tag", labeller, env_var="TOY_TAG", cli_option="--tag", config_key="label")
    for clashing, words in [(other_key, "a different need is already called 'label'"),
                            (same_key, "takes configurable.label, the key of need 'label'")]:
        second = Method(name="labelled_again", description="another", needs=(clashing,), **SCHEMAS)
        with pytest.raises(MethodDefinitionError, match=words):
            register_method(second)
        assert "labelled_again" not in available_methods()
    assert [need.config_key for need in served_needs() if need.name == "label"] == ["label"]
    shared = Method(name="labelled_too", description="the same need", needs=(LABEL,), **SCHEMAS)
    register_method(shared)  # the same need declared twice is one need: fine
    try:
        assert "labelled_too" in available_methods()
    finally:
        unregister_method("labelled_too")


def test_the_server_list_of_needs_refuses_a_clash_rather_than_keep_one():
    from types import SimpleNamespace

    from pictrieve.agents.needs import all_needs

    other = Need("label", "another label", labeller, config_key="label_unchecked")
    first, second = SimpleNamespace(name="a", own_needs=(LABEL,)), SimpleNamespace(name="b", own_needs=(other,))
    assert all_needs([first, first])["label"] is LABEL
    with pytest.raises(NeedDefinitionError, match="method b: a different need is already called 'label'"):
        all_needs([first, second])
