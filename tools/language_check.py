"""Checks a candidate's parsed module against the candidate language (tools/language.py), before any of it runs:
imports, then every module-level statement, class and function, host code and @triton.jit kernels each by their
own rules. Statements identical to the task's (docstrings aside) are the task's own code and exempt.

    from tools.language_check import first_violation
    first_violation(source, task_source)  # Violation(rule, line, reason) for the first line outside it, or None
"""
from __future__ import annotations

import ast
import builtins
import importlib
import types

from tools.language import (ARITH_CALLS, BUILTINS, FORBIDDEN_ATTRS, HOST_CALLS, IMPORTABLE, INIT_CALLS, JIT_BUILTINS,
                            JIT_DECORATOR_KEYS, MODULE_METHODS, SHAPE_METHODS, TENSOR_ATTRS, TENSOR_METHODS,
                            TO_PYTHON, TORCH_VALUES, VENDOR_CALLS, VENDOR_METHODS, Violation, known_rule,
                            module_methods)


class _Outside(Exception):
    def __init__(self, rule: str, node: ast.AST, what: str):
        super().__init__(rule)
        self.violation = Violation(rule, getattr(node, "lineno", 0), what)


def first_violation(source: str, task_source: str = "") -> Violation | None:
    """The first line of `source` outside the candidate language, or None. Statements identical to the task's
    (docstrings aside) are the task's own code; the task's imports may be imported too."""
    try:
        tree = ast.parse(source)
        task = ast.parse(task_source) if task_source else ast.Module(body=[], type_ignores=[])
    except SyntaxError:
        return None  # loading the candidate reports the syntax error
    try:
        _Checker(tree, task).module()
    except _Outside as e:
        return e.violation
    return None


def _key(node: ast.AST) -> str:
    """A statement's text with its docstrings left out."""
    node = ast.parse(ast.unparse(node)).body[0]
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list) and len(body) > 1 and isinstance(body[0], ast.Expr) and \
                isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            n.body = body[1:]
    return ast.dump(node)


LIBRARY_ROOTS = ("math", "typing", "triton.language")  # read as values at any name they export


def library_value(path: str) -> bool:
    """Whether a path under math, typing or triton.language names that library's own value: math.X; typing.X
    but no function of typing's (get_type_hints evaluates strings); under triton.language, a name reached
    through triton.language's own modules only, which is Triton's or plain data. A path through a module from
    elsewhere (tl.core.builtins is Python's builtins, typing.sys is sys) reaches all of Python."""
    root = next((r for r in LIBRARY_ROOTS if path.startswith(r + ".")), None)
    parts = path[len(root or "") + 1:].split(".")
    if root is None or root != "triton.language" and len(parts) > 1:
        return False
    obj = importlib.import_module(root)
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            return True  # not there: an error when it runs
        if isinstance(obj, types.ModuleType) and not obj.__name__.startswith("triton.language"):
            return False
    if root != "triton.language":
        return root == "math" or not isinstance(obj, (types.FunctionType, types.BuiltinFunctionType))
    if isinstance(obj, types.ModuleType):
        return False  # a module held as a value (self.lib = tl.core) is read later through paths no rule sees
    if isinstance(obj, (int, float, str)):
        return True
    return (getattr(obj, "__module__", None) or type(obj).__module__ or "").startswith("triton")


class _Checker:
    def __init__(self, tree: ast.Module, task: ast.Module):
        self.tree = tree
        self.task_statements = {_key(s) for s in task.body}
        self.task_modules = {a.name for s in ast.walk(task) if isinstance(s, ast.Import) for a in s.names} | \
            {s.module for s in ast.walk(task) if isinstance(s, ast.ImportFrom) and s.module and not s.level}
        self.imports: dict[str, str] = {}  # local name -> dotted path
        self.jit: set[str] = set()  # names of @triton.jit functions
        self.classes: set[str] = {s.name for s in ast.walk(task) if isinstance(s, ast.ClassDef)}
        self.defs: set[str] = {s.name for s in ast.walk(tree) if isinstance(s, (ast.FunctionDef, ast.ClassDef))}
        self.bound: set[str] = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and
                                isinstance(n.ctx, (ast.Store, ast.Del))} | \
            {a.arg for n in ast.walk(tree) if isinstance(n, ast.arg) for a in [n]} | self.defs | \
            {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
        self.containers = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                           isinstance(n.value, (ast.List, ast.Dict, ast.ListComp, ast.DictComp))
                           for t in n.targets if isinstance(t, ast.Name)}
        self.assigned: dict[str, list[ast.expr]] = {}  # name -> every value assigned to it
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for name, value in _pairs(t, n.value):
                        self.assigned.setdefault(name, []).append(value)
            elif isinstance(n, (ast.For, ast.comprehension, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
                for t in ast.walk(n.target):
                    if isinstance(t, ast.Name):
                        self.assigned.setdefault(t.id, []).append(t)  # not a plain alias
        self.declares_vendor = any(isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "KERNELWRIGHT_TORCH_OPS"
                                                                     for t in s.targets) for s in tree.body)
        self.function: ast.FunctionDef | None = None  # the host function being checked

    # --- module level --------------------------------------------------------------------------------------
    def module(self) -> None:
        for s in self.tree.body:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                self.import_(s)
            elif isinstance(s, (ast.FunctionDef, ast.ClassDef)) and self.is_jit(s):
                self.jit.add(s.name)
        self.jit |= self.aliases_of(lambda v: isinstance(v, ast.Name) and v.id in self.jit)
        self.self_aliases = self.aliases_of(lambda v: _root(v) == "self" and isinstance(v, ast.Attribute))
        for s in self.tree.body:
            if _key(s) in self.task_statements:
                if isinstance(s, ast.ClassDef):
                    self.classes.add(s.name)
                continue
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(s, ast.FunctionDef):
                self.function_def(s, method=False)
            elif isinstance(s, ast.ClassDef):
                self.class_def(s)
            elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                self.statement(s)
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue
            elif not isinstance(s, ast.Pass):
                raise _Outside("statements", s, f"a module-level {type(s).__name__.lower()} statement (nothing "
                                                "may run at import but definitions)")
        self.self_only_in_methods([s for s in self.tree.body if _key(s) not in self.task_statements])

    def self_only_in_methods(self, statements: list[ast.stmt]) -> None:
        """`self` names the module a method runs on, and chains through it are read as the candidate's own state:
        it may be bound only as the first parameter of a method, never assigned, looped over or passed in (a
        function given tl.core as `self` read self.builtins)."""
        nodes = [n for s in statements for n in ast.walk(s)]
        firsts = {id(m.args.args[0]) for c in nodes if isinstance(c, ast.ClassDef) for m in c.body
                  if isinstance(m, ast.FunctionDef) and m.args.args and not m.decorator_list}
        for n in nodes:
            if isinstance(n, ast.arg) and n.arg == "self" and id(n) not in firsts or \
                    isinstance(n, ast.Name) and n.id == "self" and not isinstance(n.ctx, ast.Load):
                raise _Outside("python-internals", n, "self, bound other than as a method's first parameter")

    def aliases_of(self, is_alias) -> set[str]:
        """Local names whose every assignment is a value `is_alias` accepts (`kernel = row_kernel`, `p = self.pool`)."""
        return {name for name, values in self.assigned.items() if all(
            is_alias(v.body) and is_alias(v.orelse) if isinstance(v, ast.IfExp) else is_alias(v) for v in values)}

    def import_(self, s: ast.Import | ast.ImportFrom) -> None:
        if isinstance(s, ast.Import):
            for a in s.names:
                self.importable(a.name, s)
                self.imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            return
        if s.level:
            raise _Outside("imports", s, "a relative module")
        for a in s.names:
            path = f"{s.module}.{a.name}"
            if s.module not in self.task_modules and path not in IMPORTABLE and path not in self.task_modules:
                if s.module not in IMPORTABLE:
                    raise _Outside(known_rule(path) or known_rule(s.module) or "imports", s, path)
                self.value_path(path, s, callee=True)  # a name imported from torch is used as one
            self.imports[a.asname or a.name] = path

    def importable(self, module: str, node: ast.AST) -> None:
        if module in IMPORTABLE or module in self.task_modules:
            return
        raise _Outside(known_rule(module) or "imports", node, module)

    def is_jit(self, s: ast.FunctionDef | ast.ClassDef) -> bool:
        return isinstance(s, ast.FunctionDef) and any(
            self.path(d.func if isinstance(d, ast.Call) else d) == "triton.jit" for d in s.decorator_list)

    def class_def(self, s: ast.ClassDef) -> None:
        for base in s.bases:
            path = self.path(base)
            if not (path and path.startswith("torch.nn.") and path.split(".")[-1][:1].isupper()
                    and path.count(".") == 2) and not (isinstance(base, ast.Name) and base.id in self.classes):
                raise _Outside("tensor-subclass", base, ast.unparse(base))
        if s.keywords or s.decorator_list:
            raise _Outside("statements", s, "a class with a metaclass, keywords or decorators")
        self.classes.add(s.name)
        for item in s.body:
            if isinstance(item, ast.FunctionDef):
                if item.name.startswith("__") and item.name != "__init__":
                    raise _Outside("python-internals", item, item.name)
                self.own_name(item.name, item)
                self.function_def(item, method=True)
            elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                for t in item.targets if isinstance(item, ast.Assign) else [item.target]:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            self.own_name(n.id, n)
                self.statement(item)
            elif not (isinstance(item, ast.Pass) or
                      isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant)):
                raise _Outside("statements", item, f"a {type(item).__name__.lower()} statement in a class body")

    def own_name(self, name: str, node: ast.AST) -> None:
        """A name a candidate's class binds, or its code assigns on self: never one of nn.Module's methods, which
        the evaluator calls, nor one the checker takes for a tensor's method (`self.size()` in a grid would run
        whatever the candidate made `size`)."""
        if name in module_methods():
            raise _Outside("overrides", node, f"nn.Module.{name}")
        if name in TENSOR_METHODS:
            raise _Outside("overrides", node, name)

    def function_def(self, s: ast.FunctionDef, method: bool) -> None:
        self.name_ok(s.name, s)
        jit = self.is_jit(s)
        for d in s.decorator_list:
            self.decorator(d, method)
        for a in s.args.posonlyargs + s.args.args + s.args.kwonlyargs + [s.args.vararg, s.args.kwarg]:
            if a is not None:
                self.name_ok(a.arg, a)
                if a.annotation is not None:
                    self.annotation(a.annotation)
        for default in s.args.defaults + [d for d in s.args.kw_defaults if d is not None]:
            self.expr(default)
        if s.returns is not None:
            self.annotation(s.returns)
        if jit:
            for n in s.body:
                self.jit_statement(n)
            return
        outer, self.function = self.function, s
        for n in s.body:
            self.statement(n)
        self.function = outer

    def decorator(self, d: ast.expr, method: bool) -> None:
        path = self.path(d.func if isinstance(d, ast.Call) else d)
        if method and isinstance(d, ast.Name) and d.id == "staticmethod":
            return
        if path not in JIT_DECORATOR_KEYS:
            raise _Outside("statements", d, f"the decorator {ast.unparse(d)}")
        if isinstance(d, ast.Call):
            for k in d.keywords:
                if k.arg not in JIT_DECORATOR_KEYS[path]:
                    raise _Outside("callbacks", k.value, f"{path}({k.arg}=...)")
            for arg in d.args + [k.value for k in d.keywords]:
                self.expr(arg, callbacks=True)

    def annotation(self, node: ast.expr) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                raise _Outside("statements", n, "a call in an annotation")
            if isinstance(n, ast.Attribute):
                self.attribute_name(n.attr, n)

    # --- host code -----------------------------------------------------------------------------------------
    def statement(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):  # the target first: what is written says more than what is computed
            for t in s.targets:
                self.target(t)
            self.expr(s.value, callbacks=isinstance(s.value, ast.Lambda))
        elif isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            self.target(s.target)
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, (ast.Expr, ast.Return)):
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, (ast.If, ast.While)):
            self.expr(s.test)
            for n in s.body + s.orelse:
                self.statement(n)
        elif isinstance(s, ast.For):
            self.expr(s.iter)
            self.target(s.target)
            for n in s.body + s.orelse:
                self.statement(n)
        elif isinstance(s, (ast.Assert, ast.Raise)):
            for n in ast.iter_child_nodes(s):
                self.expr(n, message=True)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                if not isinstance(t, ast.Name):
                    raise _Outside("monkeypatch", t, f"a deletion of {ast.unparse(t)}")
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            self.import_(s)
        elif isinstance(s, ast.With):  # the context managers first: what they are says more than `with`
            for item in s.items:
                self.expr(item.context_expr)
            raise _Outside("statements", s, "a with statement")
        elif not isinstance(s, (ast.Pass, ast.Break, ast.Continue)):
            raise _Outside("statements", s, f"a {type(s).__name__.lower()} statement")

    def target(self, t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            self.name_ok(t.id, t)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e)
        elif isinstance(t, ast.Starred):
            self.target(t.value)
        elif isinstance(t, ast.Attribute):
            if not (isinstance(t.value, ast.Name) and t.value.id == "self" and self.function is not None):
                raise _Outside("monkeypatch", t, f"the attribute {ast.unparse(t)}")
            self.attribute_name(t.attr, t)
            self.own_name(t.attr, t)
        elif isinstance(t, ast.Subscript):
            if not (isinstance(t.value, ast.Name) and t.value.id in self.containers):
                raise _Outside("monkeypatch", t, f"an element of {ast.unparse(t.value)} (a write into a tensor "
                                                 "from Python, or into what the candidate did not make)")
            self.expr(t.slice)
        else:
            raise _Outside("monkeypatch", t, ast.unparse(t))

    def expr(self, node: ast.expr, callbacks: bool = False, message: bool = False) -> None:
        """Host expressions. `callbacks`: a lambda here is a grid or heuristic (arithmetic only); `message`: an
        f-string here is an error message."""
        if isinstance(node, ast.Call):
            self.call(node, message)
        elif isinstance(node, ast.Attribute):
            self.attribute(node)
        elif isinstance(node, ast.Name):
            self.name(node, callee=False)
        elif isinstance(node, ast.Lambda):
            if not callbacks:
                raise _Outside("callbacks", node, "a lambda outside a launch grid or a heuristic")
            self.arithmetic(node.body)
        elif isinstance(node, ast.JoinedStr) and not message:
            raise _Outside("tensor-to-python", node, "an f-string outside an error message")
        elif isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise _Outside("statements", node, type(node).__name__.lower())
        elif isinstance(node, ast.Dict) and callbacks:
            for n in node.keys + node.values:
                if n is not None:
                    self.expr(n, callbacks=True)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child, message=message)
                elif isinstance(child, ast.comprehension):
                    self.target(child.target)
                    for n in [child.iter, *child.ifs]:
                        self.expr(n)
                elif isinstance(child, ast.keyword):
                    self.expr(child.value)

    def call(self, node: ast.Call, message: bool = False) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr" and func.id not in self.bound and \
                len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant) and \
                isinstance(node.args[1].value, str):  # getattr(self.seq, "2"): an attribute no identifier spells
            return self.attribute(ast.copy_location(ast.Attribute(node.args[0], node.args[1].value, ast.Load()), node))
        if isinstance(func, ast.Name) and func.id not in self.imports:
            self.name(func, callee=True)  # getattr(torch, name): the callee says more than its arguments
        for arg in node.args:
            self.expr(arg, message=message)
        for k in node.keywords:
            self.expr(k.value, message=message)
        if isinstance(func, ast.Subscript):  # kernel[grid](...)
            if isinstance(func.value, ast.Name) and func.value.id in self.jit:
                return self.grid(func.slice)
            if _root(func) == "self":
                return self.expr(func)  # a submodule of a container (self.layers[i](x))
            raise _Outside("calls", func, f"{ast.unparse(func.value)}[...], which is not a @triton.jit kernel "
                                          "of this file")
        path = self.path(func)
        if path is not None:
            return self.library_call(path, node)
        if isinstance(func, ast.Name):
            if func.id in ("int", "float", "bool", "complex") and node.args and self.is_tensor(node.args[0]):
                raise _Outside("tensor-to-python", node, f"{func.id}({ast.unparse(node.args[0])})")
            if func.id == "super" and not node.args:
                return
            if func.id in ("str", "repr") and not message:
                raise _Outside("tensor-to-python", node, f"{func.id}() outside an error message")
            return self.name(func, callee=True)
        if isinstance(func, ast.Attribute):
            method = func.attr
            self.attribute_name(method, func)
            if isinstance(func.value, ast.Call) and getattr(func.value.func, "id", "") == "super":
                return
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                if method in MODULE_METHODS or method in self.defs or method in self.self_attributes():
                    return
                raise _Outside("calls", func, f"self.{method}, which is neither a method of this file nor one of "
                                              "its submodules")
            self.expr(func.value)
            if method in TENSOR_METHODS or _root(func.value) == "self" and method in self.defs:
                return
            if method in VENDOR_METHODS:
                if self.declares_vendor:
                    return
                raise _Outside("vendor", func, f".{method}()")
            raise _Outside("calls", func, f".{method}()")
        self.expr(func)  # getattr(torch, name)(x): what made the callee says more
        raise _Outside("calls", func, ast.unparse(func))

    def library_call(self, path: str, node: ast.Call) -> None:
        if path in HOST_CALLS or path.startswith("math.") or path in ("triton.jit",):
            if path == "triton.Config":
                for k in node.keywords:
                    if k.arg and "hook" in k.arg:
                        raise _Outside("hooks", k.value, f"triton.Config({k.arg}=...)")
            return
        if path in VENDOR_CALLS:
            if self.declares_vendor:
                return
            raise _Outside("vendor", node, path)
        in_init = self.function is not None and self.function.name == "__init__"
        constructor = path.startswith("torch.nn.") and path.split(".")[2][:1].isupper() and path.count(".") == 2
        if path in INIT_CALLS or constructor or path.startswith("torch.nn.init."):
            if in_init:
                return
            raise _Outside("init-only", node, path)
        raise _Outside(known_rule(path) or "calls", node, path)

    def grid(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name) and node.id in self.defs:
            raise _Outside("callbacks", node, f"a grid function {node.id} (a grid is a tuple or a lambda)")
        if isinstance(node, ast.Lambda):
            return self.arithmetic(node.body)
        self.arithmetic(node)

    def arithmetic(self, node: ast.expr) -> None:
        """Grids and heuristics, which Triton calls back during a launch: names, constants, shapes, operators and
        triton.cdiv; no method calls but shape queries, no lambdas, nothing assigned."""
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                path = self.path(n.func)
                method = n.func.attr if isinstance(n.func, ast.Attribute) and path is None else None
                name = n.func.id if isinstance(n.func, ast.Name) and path is None else None
                if not (path in ARITH_CALLS or (path or "").startswith("math.") or method in SHAPE_METHODS
                        or name in ARITH_CALLS):
                    raise _Outside("callbacks", n, f"a call of {ast.unparse(n.func)} in a grid or heuristic")
            elif isinstance(n, (ast.Lambda, ast.NamedExpr, ast.Yield, ast.Await, ast.JoinedStr)):
                raise _Outside("callbacks", n, f"{type(n).__name__} in a grid or heuristic")
        self.expr(node)

    def attribute(self, node: ast.Attribute) -> None:
        self.attribute_name(node.attr, node)
        path = self.path(node)
        if path is not None:
            return self.value_path(path, node, callee=False)
        if _root(node) in ("self", *self.self_aliases) or node.attr in TENSOR_ATTRS:
            return self.expr(node.value)
        raise _Outside("calls" if node.attr in TENSOR_METHODS else "values", node, f".{node.attr}")

    def value_path(self, path: str, node: ast.AST, callee: bool) -> None:
        """A library name read (not called): dtypes, classes to derive from or test against, math, tl."""
        last = path.split(".")[-1]
        ok = library_value(path) or \
            path.startswith("torch.") and path.count(".") == 1 and last in TORCH_VALUES or \
            path.startswith("torch.nn.") and path.count(".") == 2 and last[:1].isupper() or \
            path == "torch.Tensor" or \
            callee and (path in HOST_CALLS or path in VENDOR_CALLS or path in INIT_CALLS or path in JIT_DECORATOR_KEYS)
        if not ok:
            raise _Outside(known_rule(path) or "values", node, path)

    def name(self, node: ast.Name, callee: bool) -> None:
        n = node.id
        self.name_ok(n, node)
        if n in self.imports:
            return self.value_path(self.imports[n], node, callee)
        if n in self.bound or n in BUILTINS:
            return
        rule = "computed-names" if n in ("getattr", "setattr", "delattr", "hasattr", "globals", "locals",
                                         "vars") else known_rule(n) or "builtins"
        raise _Outside(rule, node, n)

    def name_ok(self, n: str, node: ast.AST) -> None:
        if n.startswith("__") and n.endswith("__") and n != "__init__":
            raise _Outside("python-internals", node, n)

    def attribute_name(self, attr: str, node: ast.AST) -> None:
        if "hook" in attr.lower():
            raise _Outside("hooks", node, attr)
        if attr in TO_PYTHON:
            raise _Outside("tensor-to-python", node, f".{attr}")
        if attr.startswith("_") and attr != "__init__":
            raise _Outside("python-internals", node, attr)
        if attr in FORBIDDEN_ATTRS and _root(node) not in self.imports:
            raise _Outside("grad-mode" if "grad" in attr else "calls", node, f".{attr}")

    def path(self, node: ast.expr) -> str | None:
        """The dotted library path an expression names (`F.linear` -> torch.nn.functional.linear), or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.imports:
            return ".".join([self.imports[node.id]] + parts[::-1])
        return None

    def is_tensor(self, node: ast.expr) -> bool:
        """Where it shows, whether an expression is a tensor: a forward argument, an element of one, a tensor
        method's result, or a parameter or buffer of self."""
        if isinstance(node, ast.Name) and self.function is not None and self.function.name == "forward":
            return node.id in {a.arg for a in self.function.args.args[1:]}
        if isinstance(node, ast.Subscript):
            return not (isinstance(node.value, ast.Attribute) and node.value.attr == "shape") and \
                not isinstance(node.value, ast.Call) and self.is_tensor(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in TENSOR_METHODS - SHAPE_METHODS - {"is_contiguous", "get_device", "index",
                                                                     "count", "is_floating_point", "is_complex"}
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return node.attr in self.self_tensors()
        return False

    def self_attributes(self) -> set[str]:
        return {t.attr for n in ast.walk(self.tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self"}

    def self_tensors(self) -> set[str]:
        return {t.attr for n in ast.walk(self.tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and (self.path(n.value.func) or "").startswith("torch.")
                for t in n.targets if isinstance(t, ast.Attribute)}

    # --- kernels -------------------------------------------------------------------------------------------
    def jit_statement(self, s: ast.stmt) -> None:
        allowed = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.If, ast.For, ast.While,
                   ast.Assert, ast.Pass, ast.Break, ast.Continue)
        if not isinstance(s, allowed):
            raise _Outside("kernel-language", s, f"a {type(s).__name__.lower()} statement")
        for n in ast.walk(s):
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(getattr(n, "ctx", None), ast.Store):
                raise _Outside("kernel-language", n, f"an assignment to {ast.unparse(n)}")
            if isinstance(n, (ast.Lambda, ast.Yield, ast.Await, ast.NamedExpr, ast.FunctionDef)):
                raise _Outside("kernel-language", n, type(n).__name__.lower())
            if isinstance(n, ast.Attribute):
                self.attribute_name(n.attr, n)
                path = self.path(n)
                if path is not None and not path.startswith(("triton.language", "triton.cdiv", "math.",
                                                             "triton.next_power_of_2", "torch.float", "torch.int")):
                    raise _Outside("kernel-language", n, path)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id not in self.jit and \
                    n.func.id not in JIT_BUILTINS and not self.imports.get(n.func.id, "").startswith("triton.language"):
                raise _Outside("kernel-language", n, f"a call of {n.func.id}, which is not a @triton.jit function")
            elif isinstance(n, ast.Name):
                self.name_ok(n.id, n)
                path = self.imports.get(n.id)
                if path is not None and not path.startswith(("triton.language", "math")) or path is None and \
                        n.id not in self.bound and n.id not in JIT_BUILTINS and hasattr(builtins, n.id):
                    raise _Outside("kernel-language", n, n.id)


def _pairs(target: ast.expr, value: ast.expr):
    """(name, value) for each name an assignment binds; a name unpacked from something else gets the target."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
        for i, t in enumerate(target.elts):
            yield from _pairs(t, value.elts[i] if same else t)


def _root(node: ast.expr) -> str | None:
    """The name an attribute, subscript or call chain starts from."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Call):
            constant_getattr = getattr(node.func, "id", "") == "getattr" and node.args
            node = node.args[0] if constant_getattr else node.func
        else:
            node = node.value
    return node.id if isinstance(node, ast.Name) else None
