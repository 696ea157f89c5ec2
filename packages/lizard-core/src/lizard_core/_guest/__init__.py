"""Guest programs: standard-library Python (3.8+) that runs inside the sandbox.

The sources here are written for people (docstrings, comments, type annotations). What travels in
every exec request's argv is :func:`program`'s compact form of them: the same syntax tree without
docstrings, comments or annotations, indented by one space per level: smaller, and still
Python 3.8 code.

A guest program may be written in parts: a line ``from ._part import name, ...`` (a sibling
module whose name starts with ``_``) is replaced in :func:`source` by that part's code, once per
program, so a program still travels as one file. A part opens with its docstring and
``from __future__ import annotations``; what comes before that line is not bundled.
:mod:`._prelude` holds what every program shares.

A guest program may carry another as text: a top-level ``NAME = carried("other")`` becomes, in the
compact form, that string constant holding ``other``'s compact form bundled without the parts the
carrier has (the carrier runs it in its own globals). The launcher so carries the hub, which it
compiles only where it needs it.

A guest program may travel in parts: a top-level ``part_break()`` statement ends one, written as
the line :data:`PART_BREAK` in the compact form, where ``lizard_core._guest_relay.packed`` splits
it. The launcher compiles each part only once those before it have run (``._run``), so a first
part can set slow work going (the kernel client starts the daemon's Python) before the rest of the
program is compiled. As one text (``python3 -c``) it runs the same.

Rules for a guest program, so that the compact form runs as the source does: import ``typing``
names and use ``from __future__ import annotations`` for annotations only (both imports and every
``if TYPE_CHECKING:`` block are dropped); no f-strings (3.8's grammar is narrower than what
``ast.unparse`` writes for some of them); never leave a block whose only statement is a bare
annotation.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from collections.abc import Callable
from importlib import resources

__all__ = ["PART_BREAK", "program", "source"]

PART_BREAK = "\n#part\n"
"""The line that ends one part of a compact program (``part_break()`` in its source)."""
_PART_MARK = "__lizard_part_break__"


_PART = re.compile(r"^from \.(_\w+) import (?:\([^)]*\)|[^\n]*)\n", re.MULTILINE)
_FUTURE = "from __future__ import annotations\n"


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")


@functools.cache
def source(name: str) -> str:
    """The readable source of the guest program ``name``, with the parts it imports bundled."""
    return _bundle(_read(name), set())


def _bundle(text: str, seen: set[str]) -> str:
    def inline(match: re.Match[str]) -> str:
        part = match.group(1)
        if part in seen:
            return ""
        seen.add(part)
        code = _read(part)
        if _FUTURE not in code:
            raise ValueError(f"guest part {part} must import annotations from __future__")
        return _bundle(code.split(_FUTURE, 1)[1], seen)

    return _PART.sub(inline, text)


class _Compact(ast.NodeTransformer):
    """Drop what the interpreter does not need: docstrings and type annotations.

    And mark where the programs carried as text go (``carried("name")``, built by ``carry``):
    :attr:`carried` holds them, in order, for :func:`_compact` to write as raw strings.
    """

    def __init__(self, carry: Callable[[str], str]) -> None:
        self.carry = carry
        self.carried: list[str] = []

    def visit_Assign(self, node: ast.Assign) -> ast.Assign:
        value = node.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "carried"
            and len(value.args) == 1
            and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)
        ):
            self.carried.append(self.carry(value.args[0].value))
            node.value = ast.Name(id=_carried_mark(len(self.carried) - 1), ctx=ast.Load())
        self.generic_visit(node)
        return node

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        # Docstrings, those of constants and of bundled parts included: a bare string does nothing.
        body = [
            statement
            for statement in body
            if not (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            )
        ]
        return body or [ast.Pass()]

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = [
            ast.Expr(ast.Name(id=_PART_MARK, ctx=ast.Load())) if _is_part_break(s) else s
            for s in self._body(node.body)
        ]
        self.generic_visit(node)
        # Bundled parts import what the program already has: once is enough.
        seen: set[str] = set()
        body = []
        for statement in node.body:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                key = ast.dump(statement)
                if key in seen:
                    continue
                seen.add(key)
            body.append(statement)
        node.body = body
        return node

    def _function(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.body = self._body(node.body)
        node.returns = None
        all_args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for arg in [*all_args, node.args.vararg, node.args.kwarg]:
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        return self._function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.body = self._body(node.body)
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt | None:
        if node.value is None:
            return None  # a bare declaration does nothing at run time
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)

    def visit_If(self, node: ast.If) -> ast.stmt | None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return None  # imports for annotations, which are gone
        self.generic_visit(node)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.stmt | None:
        if node.module in ("__future__", "typing"):
            return None  # only ever imported for annotations
        return node


def _is_part_break(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Name)
        and statement.value.func.id == "part_break"
        and not statement.value.args
    )


# CPython 3.11's AST constructor keeps a recursion counter that threads share, so building two
# programs at once can fail with "AST constructor recursion depth mismatch" (seen with four
# executors starting together): programs are built one at a time.
_BUILDING = threading.Lock()


@functools.cache
def program(name: str) -> str:
    """The compact form of guest program ``name``, ready to pass as ``python3 -c`` text."""
    with _BUILDING:
        return _program(name, set())


def _program(name: str, seen: set[str]) -> str:
    """The compact form of ``name``, bundled without the parts in ``seen`` (which it adds to)."""
    text = _bundle(_read(name), seen)
    return _compact(text, lambda carried: _program(carried, set(seen)))


def _carried_mark(index: int) -> str:
    return f"__lizard_carried_{index}__"


def _compact(text: str, carry: Callable[[str], str]) -> str:
    compact = _Compact(carry)
    tree = compact.visit(ast.parse(text))
    if any(_is_part_break(ast.Expr(node)) for node in ast.walk(tree) if isinstance(node, ast.Call)):
        raise ValueError("part_break() belongs at the top level, after the first statement")
    text = ast.unparse(ast.fix_missing_locations(tree))
    # One space per indentation level. Safe because unparse writes every string literal on one
    # line, so leading spaces are always indentation.
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        lines.append(" " * ((len(line) - len(stripped)) // 4) + stripped)
    text = "\n".join(lines) + "\n"
    text = text.replace("\n%s\n" % _PART_MARK, PART_BREAK)
    if _PART_MARK in text:
        raise ValueError("part_break() belongs at the top level, after the first statement")
    # A carried program as a raw string, its lines as they are: smaller, deflated, than the
    # escaped one-line literal unparse would write (it travels in every request).
    for index, carried in enumerate(compact.carried):
        if "'''" in carried or carried.endswith("\\"):
            raise ValueError("a carried program cannot be written as a raw string")
        if PART_BREAK in carried:
            raise ValueError("a carried program travels in one part")
        text = text.replace(_carried_mark(index), "r'''" + carried + "'''", 1)
    return text
