"""How every page is put together, declared once: its registration and layout, its
callbacks' named outputs and what they become when the page's data is unavailable or an
input is refused, and the guard between Dash and the page's pure functions.

A page (a package of ``dash_app/pages``) declares only what is its own::

    PAGE = Page(__name__, "/trend", "Nightly trend", INTRO, order=7)
    OUTPUTS = Outputs.of_page(              # with search and refresh_off (below)
        "trend",
        figure=blank_figure("trend-figure"),
        flags=message("trend-flags"),       # the failure's message goes here
    )

    def update(task: str | None, ...) -> dict[str, Any]:  # inputs in, named outputs out
        return OUTPUTS.answer(search=..., figure=..., flags=..., refresh_off=...)

    def register(app: Dash) -> None:
        PAGE.register(parse_trend, build)
        OUTPUTS.wire(app, update, *values("trend-task", ...), tick("trend"))

An update opens with what it shows: :func:`chosen` (a run, say) or, on a sweep's page,
:func:`shown_sweep`; while none is chosen, or there is no such one, the page says so.

The main callback of a page also sets its address (``search``: left as it is on failure) and
whether its refresher stops (``refresh_off``: it stops on failure).

:func:`guarded` turns any failure of a layout or callback into a friendly message on the
page (database trouble with its advice, anything else as "logged on the server") instead of
a traceback or a broken page, and refuses inputs of a kind no page sends.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import dash
from dash import Dash, Input, Output, ctx, html, no_update

from dash_app import components as ui
from dash_app import data, plots
from dash_app.data import BadInput, DataUnavailable

if TYPE_CHECKING:
    from results_db.queries.sweeps import SweepInfo
    from scalebench.tasks.published import PublishedPoint

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

UNEXPECTED = "The dashboard hit an unexpected error; the details are in the server's log."
WRONG_KINDS = "This page was asked with inputs of a kind it never sends; reload the page."

# Names a callback's annotations use, and the kinds of value each admits.
_KINDS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "None": (type(None),),
    "list": (list,),
    "dict": (dict,),
}


def wrong_kinds(
    signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[str]:
    """The arguments of a call that are not of the kind a callback's ``signature`` declares
    (``str | None``, ``list[str]``, ...), as ``name=<type>``; parameters annotated in
    other words are not checked."""
    found = []
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
    except TypeError:
        return ["the number of inputs"]
    for name, value in bound.items():
        annotation = str(signature.parameters[name].annotation)
        names = [part.strip().split("[", 1)[0] for part in annotation.split("|")]
        if not names or not all(n in _KINDS for n in names):
            continue
        kinds = tuple(kind for n in names for kind in _KINDS[n])
        if isinstance(value, bool) and bool not in kinds:
            found.append(f"{name}=bool")
        elif not isinstance(value, kinds):
            found.append(f"{name}={type(value).__name__}")
    return found


class NotShown(Exception):
    """What a callback cannot show, said on its page instead (an input not chosen yet, a
    sweep or run not in the database): the callback answers with its outputs' failure of
    this message, and nothing is logged."""


def guarded(fallback: Callable[[str], Any]) -> Callable[[F], F]:
    """Decorate a layout or callback: on failure return ``fallback(message)`` instead. A
    call whose inputs are not of the kinds the function declares (what no page of this
    dashboard sends) is refused before it runs, with one log line naming them; a query
    refusing an argument (:class:`~dash_app.data.BadInput`) the same way. What it cannot
    show (:class:`NotShown`) or read (:class:`~dash_app.data.DataUnavailable`) is said."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            odd = wrong_kinds(signature, args, kwargs)
            try:
                if odd:
                    raise BadInput(f"inputs of the wrong kind: {', '.join(odd)}")
                return function(*args, **kwargs)
            except (DataUnavailable, NotShown) as exc:
                return fallback(str(exc))
            except BadInput as exc:
                log.warning("dashboard: %s refused: %s", function.__qualname__, str(exc)[:300])
                return fallback(WRONG_KINDS)
            except Exception:
                log.exception("dashboard: %s failed", function.__qualname__)
                return fallback(UNEXPECTED)

        return wrapper  # type: ignore[return-value]

    return decorate


# -- a callback's named outputs ------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One named output of a callback, and what it shows when the page's data is
    unavailable or an input is refused (``on_failure`` of the message; None: left as it
    is)."""

    output: Output
    on_failure: Callable[[str], Any] | None = None


def message(element_id: str) -> Slot:
    """An element's children, where a failure's message is shown as an error."""
    return Slot(Output(element_id, "children"), ui.error_alert)


def blank_figure(element_id: str, title: str = "") -> Slot:
    """A graph's figure, blank with the failure's message (and ``title``) on failure."""
    return Slot(Output(element_id, "figure"), lambda text: plots.empty_figure(text, title))


def cleared(element_id: str, prop: str = "children", value: Any = None) -> Slot:
    """An element's ``prop``, set to ``value`` (nothing shown) on failure."""
    return Slot(Output(element_id, prop), lambda _text: copy.deepcopy(value))


def kept(element_id: str, prop: str) -> Slot:
    """An element's ``prop``, left as it is on failure."""
    return Slot(Output(element_id, prop))


def address(prefix: str) -> Slot:
    """The page's address bar (:func:`~dash_app.components.location`), kept on failure."""
    return kept(f"{prefix}-url", "search")


def refresh(prefix: str) -> Slot:
    """Whether the page's refresher (:func:`~dash_app.components.refresher`) is off; a
    failure turns it off."""
    return cleared(f"{prefix}-refresh", "disabled", True)


class Outputs:
    """A callback's named outputs (:class:`Slot` each), the answers made of them, and the
    wiring of the callback to a page's pure update function."""

    def __init__(self, **slots: Slot) -> None:
        self.slots = slots

    @classmethod
    def of_page(
        cls, prefix: str, *, networks: bool = False, published: bool = False, **slots: Slot
    ) -> Outputs:
        """The outputs of a page's main callback: its address bar (``search``,
        :func:`address`), with ``published`` the note under its published-results switch
        (``published_note``: ``<prefix>-published-note``, emptied on failure), ``slots``,
        whether its refresher stops (``refresh_off``, :func:`refresh`) and, with
        ``networks``, its network picker's (:func:`~dash_app.components.network_picker`,
        ``<prefix>-network``) options and visibility (``network_options``,
        ``network_style``: both left as they are on failure; their values are
        :meth:`~dash_app.components.NetworkChoice.values`)."""
        note = {"published_note": cleared(f"{prefix}-published-note")} if published else {}
        pickers: dict[str, Slot] = {}
        if networks:
            pickers = {
                "network_options": kept(f"{prefix}-network", "options"),
                "network_style": kept(f"{prefix}-network-column", "style"),
            }
        return cls(search=address(prefix), **note, **slots, refresh_off=refresh(prefix), **pickers)

    @property
    def outputs(self) -> dict[str, Output]:
        """The named Dash outputs, for ``app.callback(output=...)``."""
        return {name: slot.output for name, slot in self.slots.items()}

    def answer(self, **values: Any) -> dict[str, Any]:
        """The callback's answer: ``values`` where given, nothing updated elsewhere."""
        unknown = set(values) - set(self.slots)
        if unknown:
            raise KeyError(f"not outputs of this callback: {', '.join(sorted(unknown))}")
        return {name: values.get(name, no_update) for name in self.slots}

    def failure(self, text: str) -> dict[str, Any]:
        """The answer when the data is unavailable or an input is refused: every slot as
        its :attr:`Slot.on_failure` makes it, with ``text`` where a message is shown."""
        return self.answer(
            **{
                name: slot.on_failure(text)
                for name, slot in self.slots.items()
                if slot.on_failure is not None
            }
        )

    def wire(
        self, app: Dash, update: Callable[..., Any], *inputs: Input, told: bool = False
    ) -> None:
        """Make ``update`` the callback of these outputs on ``app``, fed ``inputs`` in
        order and :func:`guarded` by :meth:`failure`. ``told``: ``update`` is also given,
        as ``triggered``, the id of the element whose change called it."""
        safe = guarded(self.failure)(update)
        callback: Callable[..., Any] = safe
        if told:

            def callback(*values: Any) -> Any:
                return safe(*values, triggered=ctx.triggered_id)

        app.callback(output=self.outputs, inputs=list(inputs))(callback)


# -- the opening of a page's update -------------------------------------------------------


def chosen(value: str | None, find: Callable[[str], T | None], kind: str, ask: str = "") -> T:
    """What a page's callback shows: ``find(value)``, the ``kind`` ("sweep", "run") whose id
    the picker's ``value`` is. :class:`NotShown` while none is chosen (``ask``, by default
    "Choose a <kind>.") or where there is no such one."""
    if not value:
        raise NotShown(ask or f"Choose a {kind}.")
    found = find(value)
    if found is None:
        raise NotShown(f"There is no {kind} {value!r} in the database.")
    return found


@dataclass(frozen=True)
class SweepShown:
    """The training sweep a page's callback shows (:func:`shown_sweep`): where it is read
    from, its network profiles shown, and the published results drawn beside each of them
    (``published[profile]``) with the note under the switch."""

    source: data.Source
    sweep: SweepInfo
    networks: ui.NetworkChoice
    published: dict[str, tuple[PublishedPoint, ...]]
    note: Any

    @property
    def shown(self) -> list[str]:
        """The network profiles drawn, in order."""
        return self.networks.shown


def shown_sweep(
    sweep_id: str | None, network: str | None, published: str | None, ask: str = ""
) -> SweepShown:
    """The opening of a sweep page's callback: the sweep ``sweep_id`` (:func:`chosen`, with
    ``ask``), its profiles as the picker's ``network`` shows them and, where ``published``
    is "on", the published results (drawn once: they ran on real clusters' networks, so
    beside the first profile shown only)."""
    source = data.current()
    sweep = chosen(sweep_id, source.sweep, "sweep", ask)
    networks = ui.choose_networks(source.networks(sweep.id), network)
    points, note = ui.published_for(sweep, published == "on")
    beside = {name: points if i == 0 else () for i, name in enumerate(networks.shown)}
    return SweepShown(source, sweep, networks, beside, note)


# -- a callback's inputs -------------------------------------------------------------------


def values(*element_ids: str) -> list[Input]:
    """The ``value`` of each of ``element_ids``, in order, as a callback's inputs."""
    return [Input(element_id, "value") for element_id in element_ids]


def tick(prefix: str) -> Input:
    """The page's refresher's (:func:`~dash_app.components.refresher`) count of intervals,
    as a callback's input: the callback runs again every few seconds while it is on."""
    return Input(f"{prefix}-refresh", "n_intervals")


# -- a page ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """A page's registration: its module, address, title, line of introduction and place
    in Dash's page registry (``name``: the registry's name, default the title; ``tab``:
    the browser tab's title, default ``scalebench · <title>``)."""

    module: str
    path: str
    title: str
    intro: str
    order: int | None = None
    name: str | None = None
    tab: str | None = None

    def __call__(self, *children: Any, problems: Sequence[str] = ()) -> html.Div:
        """The page with ``children`` under its title and introduction."""
        return ui.page(self.title, self.intro, *children, problems=problems)

    def failed(self, text: str) -> html.Div:
        """The page saying why it cannot be shown."""
        return self(ui.error_alert(text))

    def empty(self, problems: Sequence[str]) -> html.Div:
        """The page of an empty database: what to run."""
        return self(ui.empty_database(), problems=problems)

    def layout(
        self,
        parse: Callable[[Mapping[str, Any]], tuple[Any, list[str]]],
        build: Callable[[Any, list[str]], html.Div],
    ) -> Callable[..., html.Div]:
        """The layout function Dash calls with the URL's query parameters: ``parse`` reads
        them into the page's state and the problems with them, ``build`` makes the page
        of those (a failure of it: :meth:`failed`)."""
        safe = guarded(self.failed)(build)

        def layout(**params: Any) -> html.Div:
            state, problems = parse(params)
            return safe(state, problems)

        return layout

    def register(
        self,
        parse: Callable[[Mapping[str, Any]], tuple[Any, list[str]]],
        build: Callable[[Any, list[str]], html.Div],
    ) -> None:
        """Add the page to Dash's registry, its layout made of ``parse`` and ``build``."""
        dash.register_page(
            self.module,
            path=self.path,
            name=self.name or self.title,
            title=self.tab or f"scalebench · {self.title}",
            layout=self.layout(parse, build),
            order=self.order,
        )
