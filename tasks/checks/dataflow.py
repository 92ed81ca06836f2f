"""The part of a python step that its printed value depends on (a backward slice over top-level statements).

Why: a real Planner writes `hours_teacher = 35` and then leaves `hours_teacher` out of the sum it prints; every
check that looks at which numbers the program *contains* counts 35 as used. Only the statements the printed
value flows from say which of the question's quantities the answer actually uses.
"""

from __future__ import annotations

import ast

# a program with these is not sliced: a function body or a global can carry a value past the names we follow
_OPAQUE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Global, ast.Nonlocal,
           ast.Import, ast.ImportFrom, ast.With, ast.Try)


def _prints(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print" for n in ast.walk(stmt))


def _loaded(stmt: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _changed(stmt: ast.stmt) -> set[str]:
    """Names a statement may change: assigned, loop targets, and objects mutated in place (`xs.append(3)`,
    `d[k] = 3`, `xs[0] += 1`)."""
    out = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for n in ast.walk(stmt):
        base = None
        if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
            base = n.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            base = n.func.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        if isinstance(base, ast.Name):
            out.add(base.id)
    return out


def printed_slice(code: str) -> str | None:
    """The program cut to the statements its output depends on, as source; None when it cannot be sliced safely
    (a syntax error, functions, imports, globals): the caller then uses the whole program. A program that prints
    nothing is shown as the sandbox shows it: its last expression, or the name its last statement assigns."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    body = tree.body
    if not body or any(isinstance(n, _OPAQUE) for n in ast.walk(tree)):
        return None
    keep: set[int] = {i for i, s in enumerate(body) if _prints(s)}
    needed: set[str] = set()
    if not keep:  # echo_expression's rule: the last expression, or the last statement's target
        last = body[-1]
        if not isinstance(last, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return None
        keep.add(len(body) - 1)
    for i in keep:
        needed |= _loaded(body[i]) | (_changed(body[i]) if isinstance(body[i], ast.AugAssign) else set())
    changed = True
    while changed:  # to a fixpoint: a loop may need a name that a later statement defines
        changed = False
        for i in reversed(range(len(body))):
            if i in keep or not (_changed(body[i]) & needed):
                continue
            keep.add(i)
            # an augmented or compound statement also reads what it changes; a plain assignment need not, but
            # keeping its target needed only ever keeps more statements (the check then flags less)
            needed |= _loaded(body[i]) | _changed(body[i])
            changed = True
    return ast.unparse(ast.Module(body=[body[i] for i in sorted(keep)], type_ignores=[]))
