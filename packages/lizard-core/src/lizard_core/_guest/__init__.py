"""Guest programs: standard-library Python (3.8+) that runs inside the sandbox.

The sources here are written for people (docstrings, comments, type annotations). What travels in
every exec request's argv is :func:`program`'s compact form of them: the same syntax tree without
docstrings, comments or annotations, indented by one space per level, which is about 60% of the
size and still Python 3.8 code.

Rules for a guest program, so that the compact form runs as the source does: import ``typing``
names and use ``from __future__ import annotations`` for annotations only (both imports and every
``if TYPE_CHECKING:`` block are dropped); no f-strings (3.8's grammar is narrower than what
``ast.unparse`` writes for some of them); never leave a block whose only statement is a bare
annotation.
"""

from __future__ import annotations

import ast
import functools
from importlib import resources

__all__ = ["program", "source"]


def source(name: str) -> str:
    """The readable source of the guest program ``name`` (a module in this package)."""
    return resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")


class _Compact(ast.NodeTransformer):
    """Drop what the interpreter does not need: docstrings and type annotations."""

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        first = body[0] if body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            body = body[1:]
        return body or [ast.Pass()]

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = self._body(node.body)
        self.generic_visit(node)
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


@functools.cache
def program(name: str) -> str:
    """The compact form of guest program ``name``, ready to pass as ``python3 -c`` text."""
    tree = _Compact().visit(ast.parse(source(name)))
    text = ast.unparse(ast.fix_missing_locations(tree))
    # One space per indentation level. Safe because unparse writes every string literal on one
    # line, so leading spaces are always indentation.
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        lines.append(" " * ((len(line) - len(stripped)) // 4) + stripped)
    return "\n".join(lines) + "\n"
