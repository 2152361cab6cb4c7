"""Every Sphinx cross-reference in the product's docstrings names something that exists.

The product's modules (``scalebench``, ``workers``, ``operators``, ``results_db``,
``dash_app``, ``cli``, ``dags``) are read with :mod:`ast`, never imported, so torch, Airflow
and Dash stay unloaded: the check takes a few seconds. Each docstring (of a module, a class or
a function, and the string under an attribute that documents it) is searched for ``:mod:``,
``:func:``, ``:class:``, ``:meth:``, ``:data:``, ``:attr:``, ``:exc:`` and ``:obj:``
references (``:py:`` prefixed too), in every form Sphinx reads: ``a.b.c``, ``~a.b.c``,
``.b.c``, ``title <a.b.c>``, ``f()``; one with ``!`` links nowhere and is not checked.

How a name is resolved, first match wins:

1. relative to where the docstring is: the members of the enclosing classes, innermost first
   (``:meth:`wait``` in a class's docstring; inherited members too), then the module's own
   top-level names (those bound inside ``if`` and ``try`` included), among them what it
   imports, followed to where the import points;
2. as a dotted path from a product package: its modules (a package's module before a name
   its ``__init__`` binds, as Sphinx names modules), the names each module defines or
   imports, and classes' members: methods, class attributes, annotated fields, ``self.x``
   set in a method, and the members of base classes;
3. a builtin (``ValueError``);
4. a standard-library name: imported with :mod:`importlib` (cheap) and followed attribute by
   attribute;
5. any other top-level name that Python finds (:func:`importlib.util.find_spec`, which
   imports nothing): a third-party package (torch, sqlalchemy, airflow, dash, plotly,
   numpy, scipy, kubernetes...), not checked further.

Past a plain value (a module-level constant, a class attribute) or a module with a
``__getattr__``, nothing can be known without running code, so any further attribute is
accepted; so is a member of a class with a third-party base that nothing else names, since
the base may define it. ``benchmarks/`` and ``tests/`` are not product: a name there is not
found. A name that none of these finds is stale.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The folders whose docstrings are checked.
PRODUCT = ("scalebench", "workers", "operators", "results_db", "dash_app", "cli", "dags")

# (file, reference) → why it stays for now: a stale reference that cannot be fixed at once
# (the test below fails once one is fixed, so that it leaves this list).
ALLOWED: dict[tuple[str, str], str] = {}

ROLE = re.compile(
    r":(?:py:)?(?P<role>mod|func|class|meth|data|attr|exc|obj):`(?P<text>[^`]+)`", re.DOTALL
)


@dataclass
class Scope:
    """A module's or a class's names: what each is bound to."""

    module: str  # the module it is in (a module's own name)
    names: dict[str, Binding] = field(default_factory=dict)
    kind: str = "module"  # "module" or "class"
    is_package: bool = False
    star_imports: list[str] = field(default_factory=list)  # modules imported with *
    lazy: bool = False  # a module-level __getattr__: any name may exist
    bases: list[ast.expr] = field(default_factory=list)  # a class's, as written


@dataclass
class Binding:
    """What a name is bound to: ``def``, ``class`` (its :class:`Scope`), ``value``, or
    ``import`` (the dotted name it imports)."""

    kind: str
    target: str = ""
    scope: Scope | None = None


@dataclass(frozen=True)
class Found:
    """Where a name led: a product ``module`` or ``class`` (its scope), a ``def``, an
    ``opaque`` thing whose attributes cannot be known, or a ``python`` object (standard
    library or builtins) that is followed for real."""

    kind: str
    scope: Scope | None = None
    obj: Any = None


OPAQUE = Found("opaque")


def _targets(node: ast.expr) -> Iterator[str]:
    """The plain names an assignment target binds."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _bind_statements(body: list[ast.stmt], scope: Scope) -> None:
    """Bind the names ``body`` defines into ``scope``, looking into ``if``, ``try``, ``with``
    and loops but not into functions' bodies."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scope.names[node.name] = Binding("def")
            if node.name == "__getattr__" and scope.kind == "module":
                scope.lazy = True
        elif isinstance(node, ast.ClassDef):
            scope.names[node.name] = Binding("class", scope=_class_scope(node, scope.module))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in _targets(target):
                    scope.names[name] = Binding("value")
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            for name in _targets(node.target):
                scope.names.setdefault(name, Binding("value"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.names[alias.asname] = Binding("import", alias.name)
                else:
                    first = alias.name.partition(".")[0]
                    scope.names[first] = Binding("import", first)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(scope.module, scope.is_package).split(".")
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                if alias.name == "*":
                    scope.star_imports.append(base)
                else:
                    scope.names[alias.asname or alias.name] = Binding(
                        "import", f"{base}.{alias.name}"
                    )
        elif isinstance(node, ast.For | ast.AsyncFor):
            for name in _targets(node.target):
                scope.names.setdefault(name, Binding("value"))
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    for name in _targets(item.optional_vars):
                        scope.names.setdefault(name, Binding("value"))
        for block in ("body", "orelse", "finalbody"):
            if isinstance(
                node,
                ast.If | ast.Try | ast.TryStar | ast.With | ast.AsyncWith | ast.For | ast.While,
            ):
                _bind_statements(getattr(node, block, []), scope)
        if isinstance(node, ast.Try | ast.TryStar):
            for handler in node.handlers:
                _bind_statements(handler.body, scope)


def _class_scope(node: ast.ClassDef, module: str) -> Scope:
    """A class's members: its body's names and the attributes its methods set on ``self``."""
    scope = Scope(module=module, kind="class", bases=list(node.bases))
    _bind_statements(node.body, scope)
    for method in node.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(method):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign):
                targets = inner.targets
            elif isinstance(inner, ast.AnnAssign | ast.AugAssign):
                targets = [inner.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in ("self", "cls")
                ):
                    scope.names.setdefault(target.attr, Binding("value"))
    return scope


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a name or an attribute chain (a subscript's value: ``Generic[T]``)."""
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


@dataclass(frozen=True)
class Reference:
    """One cross-reference: where it is, its role and its target as written."""

    path: str
    line: int
    role: str
    target: str


class Index:
    """Modules read with :mod:`ast`, and the names they lead to."""

    def __init__(self, sources: Mapping[str, tuple[str, bool]]) -> None:
        """``sources``: module name → (its source, whether it is a package's ``__init__``)."""
        self.trees: dict[str, ast.Module] = {}
        self.modules: dict[str, Scope] = {}
        for name, (source, is_package) in sources.items():
            tree = ast.parse(source)
            scope = Scope(module=name, is_package=is_package)
            _bind_statements(tree.body, scope)
            self.trees[name] = tree
            self.modules[name] = scope
        for name in list(self.modules):  # packages without an __init__ (namespace packages)
            parts = name.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if package not in self.modules:
                    self.modules[package] = Scope(module=package, is_package=True)
                self.modules[package].is_package = True

    @classmethod
    def of_folders(cls, root: Path, folders: tuple[str, ...]) -> Index:
        """Every ``.py`` file below ``folders`` of ``root``, named as Python imports it."""
        sources: dict[str, tuple[str, bool]] = {}
        for folder in folders:
            for path in sorted((root / folder).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                is_package = parts[-1] == "__init__"
                if is_package:
                    parts.pop()
                sources[".".join(parts)] = (path.read_text(encoding="utf-8"), is_package)
        return cls(sources)

    # ── following names ──

    def member(self, found: Found, name: str, seen: frozenset[tuple[int, str]]) -> Found | None:
        """What attribute ``name`` of ``found`` is (None: it has no such attribute)."""
        if found.kind == "opaque":
            return OPAQUE
        if found.kind == "python":
            if hasattr(found.obj, name):
                return Found("python", obj=getattr(found.obj, name))
            if isinstance(found.obj, type(sys)):  # a submodule not imported yet
                return _import(f"{found.obj.__name__}.{name}")
            return None
        scope = found.scope
        if found.kind == "def" or scope is None:
            return None
        key = (id(scope), name)
        if key in seen:  # an import cycle
            return None
        seen = seen | {key}
        submodule = f"{scope.module}.{name}"
        if scope.kind == "module" and scope.is_package and submodule in self.modules:
            return Found("module", self.modules[submodule])  # as Sphinx names it
        if name in scope.names:
            return self.bound(scope.names[name], seen)
        if scope.kind == "module":
            for star in scope.star_imports:
                there = self.absolute(star, seen)
                if there is not None and (got := self.member(there, name, seen)) is not None:
                    return got
            return OPAQUE if scope.lazy else None
        for base in scope.bases:  # a class: its bases' members
            base_found = self.relative(_dotted(base), self.modules[scope.module], [], seen)
            if base_found is None or base_found.kind == "opaque":
                return OPAQUE  # a base this cannot see into
            got = self.member(base_found, name, seen)
            if got is not None:
                return got
        return None

    def bound(self, binding: Binding, seen: frozenset[tuple[int, str]]) -> Found | None:
        """Where a bound name leads."""
        if binding.kind == "def":
            return Found("def")
        if binding.kind == "class":
            return Found("class", binding.scope)
        if binding.kind == "value":
            return OPAQUE
        return self.absolute(binding.target, seen)

    def walk(
        self, found: Found | None, rest: list[str], seen: frozenset[tuple[int, str]]
    ) -> Found | None:
        for name in rest:
            if found is None:
                return None
            found = self.member(found, name, seen)
        return found

    def absolute(self, dotted: str, seen: frozenset[tuple[int, str]] = frozenset()) -> Found | None:
        """A dotted name from the top: a module read here, a builtin, a standard-library
        name, or another importable package's (opaque)."""
        parts = dotted.split(".")
        first = parts[0]
        if first in self.modules:
            return self.walk(Found("module", self.modules[first]), parts[1:], seen)
        if hasattr(builtins, first):
            return self.walk(Found("python", obj=getattr(builtins, first)), parts[1:], seen)
        if first in sys.stdlib_module_names:
            return self.walk(_import(first), parts[1:], seen)
        try:
            spec = importlib.util.find_spec(first)
        except (ImportError, ValueError):
            spec = None
        return OPAQUE if spec is not None else None

    def relative(
        self,
        dotted: str | None,
        module: Scope,
        classes: list[Scope],
        seen: frozenset[tuple[int, str]] = frozenset(),
    ) -> Found | None:
        """``dotted`` as read inside ``classes`` (outermost first) of ``module``: the
        classes' members, innermost first, then the module's names, then from the top."""
        if not dotted:
            return None
        first, *rest = dotted.split(".")
        inherited_unseen = False  # a class here has a base this cannot see into
        for scope in [*reversed(classes), module]:
            start = self.member(Found(scope.kind, scope), first, seen)
            if start is OPAQUE and scope.kind == "class" and first not in scope.names:
                inherited_unseen = True
                continue
            found = self.walk(start, rest, seen)
            if found is not None:
                return found
        found = self.absolute(dotted, seen)
        return OPAQUE if found is None and inherited_unseen else found

    # ── the references ──

    def references(self, module: str, path: str) -> Iterator[tuple[Reference, list[Scope]]]:
        """Every cross-reference in ``module``'s docstrings, with the classes around it."""

        def strings(body: list[ast.stmt]) -> Iterator[ast.Constant]:
            for statement in body:
                if (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    yield statement.value

        def visit(node: ast.AST, classes: list[Scope]) -> Iterator[tuple[Reference, list[Scope]]]:
            body = getattr(node, "body", [])
            if isinstance(node, ast.Module | ast.ClassDef):
                texts = list(strings(body))  # the docstring and attributes' strings
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                texts = list(strings(body[:1]))
            else:
                texts = []
            for text in texts:
                for match in ROLE.finditer(text.value):
                    line = text.lineno + text.value.count("\n", 0, match.start())
                    yield Reference(path, line, match["role"], match["text"]), classes
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    outer = classes[-1] if classes else self.modules[module]
                    binding = outer.names.get(child.name)
                    inner = [binding.scope] if binding and binding.scope else []
                    yield from visit(child, [*classes, *inner])
                elif isinstance(child, ast.stmt):
                    yield from visit(child, classes)

        yield from visit(self.trees[module], [])

    def resolves(self, reference: Reference, module: str, classes: list[Scope]) -> bool:
        """Whether ``reference``, read in ``module`` inside ``classes``, names something."""
        text = reference.target.strip()
        if "<" in text and text.endswith(">"):  # an explicit title: title <target>
            text = text[text.rindex("<") + 1 : -1].strip()
        if text.startswith("!"):
            return True  # links nowhere
        text = text.lstrip("~.").removesuffix("()")
        return self.relative(text, self.modules[module], classes) is not None

    def stale(self, modules: list[str], paths: Mapping[str, str]) -> list[Reference]:
        """The references of ``modules`` that name nothing."""
        return [
            reference
            for module in modules
            for reference, classes in self.references(module, paths[module])
            if not self.resolves(reference, module, classes)
        ]


@cache
def _import(name: str) -> Found | None:
    try:
        return Found("python", obj=importlib.import_module(name))
    except ImportError:
        return None


@cache
def product() -> tuple[Index, dict[str, str]]:
    """The product's index, and each product module's file (relative to the checkout)."""
    index = Index.of_folders(ROOT, PRODUCT)
    paths: dict[str, str] = {}
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            paths[".".join(parts)] = path.relative_to(ROOT).as_posix()
    return index, paths


def stale_in_product() -> list[Reference]:
    index, paths = product()
    return index.stale(sorted(paths), paths)


def test_every_cross_reference_in_the_products_docstrings_names_what_exists() -> None:
    stale = [r for r in stale_in_product() if (r.path, r.target) not in ALLOWED]
    assert not stale, "stale cross-references:\n" + "\n".join(
        f"{r.path}:{r.line}: :{r.role}:`{r.target}`" for r in stale
    )


def test_every_allowed_reference_is_still_stale() -> None:
    """An allowed reference that was fixed leaves the list."""
    still = {(r.path, r.target) for r in stale_in_product()}
    assert set(ALLOWED) <= still, f"fixed, to take off ALLOWED: {set(ALLOWED) - still}"


SYNTHETIC = {
    "pkg": (
        '"""The package: :mod:`pkg.tools`, :func:`pkg.tools.helper`, :mod:`pkg.nowhere`."""\n'
        "from pkg.tools import helper as tools\n",
        True,
    ),
    "pkg.tools": (
        '''"""Tools: :func:`helper`, :class:`~pkg.tools.Thing`, :meth:`Thing.run`,
:attr:`Thing.size`, :attr:`Thing.made`, :meth:`Thing.gone`, :func:`missing`,
:mod:`json`, :func:`json.dumps`, :func:`json.nope`, :exc:`ValueError`,
:class:`torch.nn.Module`, :func:`not_a_package_anywhere.f`, :class:`Base.kept`,
:meth:`Thing.kept`, :data:`LIMIT.anything`, :func:`dumps`, :meth:`!nothing.at.all`,
:class:`the tool <pkg.tools.Thing>`, :func:`helper()`, :func:`pkg.other.f`."""

from json import dumps

from torch.nn import Module

LIMIT = 3


def helper() -> None:
    """See :class:`Thing`."""


class Base:
    kept = 1


class Thing(Base):
    """A thing: :meth:`run` and :meth:`stop`."""

    size: int

    def __init__(self) -> None:
        self.made = True

    def run(self) -> None:
        """Runs; see :meth:`Thing.gone` and :func:`pkg.tools.helper`."""


class Later(Thing):
    """Inherits :meth:`run` and :attr:`made`; :meth:`execute` is nowhere."""


class Net(Module):
    """:meth:`forward` may come from torch's base, which is not read."""
''',
        False,
    ),
}


def test_the_checker_finds_each_stale_reference_of_a_small_source() -> None:
    index = Index(SYNTHETIC)
    stale = index.stale(["pkg", "pkg.tools"], {"pkg": "pkg/__init__.py", "pkg.tools": "t.py"})
    assert sorted((r.path, r.line, r.target) for r in stale) == [
        ("pkg/__init__.py", 1, "pkg.nowhere"),
        ("t.py", 2, "Thing.gone"),
        ("t.py", 2, "missing"),
        ("t.py", 3, "json.nope"),
        ("t.py", 4, "not_a_package_anywhere.f"),
        ("t.py", 6, "pkg.other.f"),
        ("t.py", 24, "stop"),
        ("t.py", 32, "Thing.gone"),
        ("t.py", 36, "execute"),
    ]
