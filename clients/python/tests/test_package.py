"""The installed package: typing files present, stubs in step with the extension, docs everywhere.

Proves that the wheel ships `py.typed` and both stubs; that the stubs declare exactly the
exception classes and `ErrorCode` members the extension makes from the protocol's error codes (a
new wire code fails here until the stub lists it), and every public method the runtime classes
have; and that every public class, function and method carries a docstring.
"""

import ast
import inspect
from pathlib import Path

import ferrite
import ferrite.aio
from ferrite import _ferrite

PACKAGE_DIR = Path(ferrite.__file__).resolve().parent


def stub(name: str) -> ast.Module:
    return ast.parse((PACKAGE_DIR / name).read_text(encoding="utf-8"))


def stub_classes(module: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}


def methods(node: ast.ClassDef) -> set[str]:
    return {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}


def public_methods(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") or name in ("__enter__", "__exit__", "__aenter__", "__aexit__")} - set(dir(object))


def test_typing_files_are_installed():
    for name in ("py.typed", "__init__.pyi", "aio.pyi"):
        assert (PACKAGE_DIR / name).is_file(), name


def test_the_stub_lists_every_error_class_and_code():
    classes = stub_classes(stub("__init__.pyi"))
    error_classes = {name for name, node in classes.items()
                     if name == "FerriteError" or any(isinstance(base, ast.Name) and base.id in classes for base in node.bases)}
    runtime = {name for name in dir(ferrite) if isinstance(getattr(ferrite, name), type)
               and issubclass(getattr(ferrite, name), ferrite.FerriteError)}
    assert error_classes == runtime
    members = {item.targets[0].id: item.value.value for item in classes["ErrorCode"].body
               if isinstance(item, ast.Assign)}
    assert members == _ferrite.ERROR_CODES


def test_the_stubs_declare_every_public_method():
    blocking = stub_classes(stub("__init__.pyi"))
    asynchronous = stub_classes(stub("aio.pyi"))
    for cls, declared in [(ferrite.Session, blocking["Session"]), (ferrite.Pool, blocking["Pool"]),
                          (ferrite.aio.Session, asynchronous["Session"]), (ferrite.aio.Pool, asynchronous["Pool"]),
                          (ferrite.Limits, blocking["Limits"]), (ferrite.PoolInfo, blocking["PoolInfo"]),
                          (ferrite.ValueAttributes, blocking["ValueAttributes"]),
                          (ferrite.PoolAttributes, blocking["PoolAttributes"])]:
        assert public_methods(cls) == methods(declared), cls


def test_every_public_api_has_a_docstring():
    assert ferrite.__doc__ and ferrite.aio.__doc__
    for function in (ferrite.connect, ferrite.aio.connect, ferrite.error_class):
        assert inspect.getdoc(function), function
    for cls in (ferrite.Session, ferrite.Pool, ferrite.aio.Session, ferrite.aio.Pool, ferrite.Limits, ferrite.PoolInfo,
                ferrite.ValueAttributes, ferrite.PoolAttributes, ferrite.ErrorCode):
        assert inspect.getdoc(cls), cls
        for name in public_methods(cls) - {"__enter__", "__exit__", "__aenter__", "__aexit__"}:
            if isinstance(cls, type) and issubclass(cls, int):
                continue
            assert inspect.getdoc(getattr(cls, name)), f"{cls.__name__}.{name}"
