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
from importlib import resources

__all__ = ["program", "source"]


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
    """Drop what the interpreter does not need: docstrings and type annotations."""

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
        node.body = self._body(node.body)
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


# CPython 3.11's AST constructor keeps a recursion counter that threads share, so building two
# programs at once can fail with "AST constructor recursion depth mismatch" (seen with four
# executors starting together): programs are built one at a time.
_BUILDING = threading.Lock()


@functools.cache
def program(name: str) -> str:
    """The compact form of guest program ``name``, ready to pass as ``python3 -c`` text."""
    with _BUILDING:
        return _compact(source(name))


def _compact(text: str) -> str:
    tree = _Compact().visit(ast.parse(text))
    text = ast.unparse(ast.fix_missing_locations(tree))
    # One space per indentation level. Safe because unparse writes every string literal on one
    # line, so leading spaces are always indentation.
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        lines.append(" " * ((len(line) - len(stripped)) // 4) + stripped)
    return "\n".join(lines) + "\n"
