"""Frozen dataclasses to JSON values and back, by their type hints.

A dataclass becomes an object with its fields' names (plus the properties it lists in
``_json_derived``, written after the first field but never read back); an evidence class also gets ``"type"``, its
``TYPE``, which picks the class when a union is read. ``dict[int, X]`` keys become strings,
tuples become lists. Reading checks every value against its type and raises DecodeError with
the path of the first one that does not fit.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Union


class DecodeError(ValueError):
    """A JSON value that does not fit the type it should have."""


def encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        kind = getattr(value, "TYPE", None)
        if kind is not None:
            out["type"] = kind
        for i, f in enumerate(dataclasses.fields(value)):
            out[f.name] = encode(getattr(value, f.name))
            if i == 0:   # derived values next to the first field: a finding's status beside its kind
                for name in getattr(value, "_json_derived", ()):
                    out[name] = encode(getattr(value, name))
        return out
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(tp: Any, value: Any, path: str = "$") -> Any:
    """``value`` (parsed JSON) as an instance of ``tp``."""
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        return _union(typing.get_args(tp), value, path)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp, value, path)
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        _expect(isinstance(value, dict), value, "an object", path)
        return {_key(key_t, k, path): decode(val_t, v, f"{path}.{k}") for k, v in value.items()}
    if origin is tuple:
        args = typing.get_args(tp)
        _expect(isinstance(value, list), value, "a list", path)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
        _expect(len(value) == len(args), value, f"a list of {len(args)}", path)
        return tuple(decode(t, v, f"{path}[{i}]") for i, (t, v) in enumerate(zip(args, value, strict=True)))
    if tp is type(None):
        _expect(value is None, value, "null", path)
        return None
    if tp is float:
        _expect(isinstance(value, int | float) and not isinstance(value, bool), value, "a number", path)
        return value
    if tp in (int, str, bool):
        _expect(isinstance(value, tp) and (tp is bool or not isinstance(value, bool)), value, tp.__name__, path)
        return value
    raise TypeError(f"no JSON decoding for {tp!r}")


def _union(options: tuple[Any, ...], value: Any, path: str) -> Any:
    if value is None:
        _expect(type(None) in options, value, "a value", path)
        return None
    tags = {tag: t for t in options if isinstance(t, type) and (tag := getattr(t, "TYPE", None)) is not None}
    if tags and isinstance(value, dict) and "type" in value:
        match = tags.get(value["type"])
        _expect(match is not None, value["type"], "a known evidence type", f"{path}.type")
        return decode(match, value, path)
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return decode(option, value, path)
        except DecodeError as exc:
            errors.append(str(exc))
    raise DecodeError(errors[0] if len(errors) == 1 else f"{path}: {value!r:.60} fits none of its types")


def _dataclass(cls: type, value: Any, path: str) -> Any:
    _expect(isinstance(value, dict), value, "an object", path)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in value:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise DecodeError(f"{path}: no field {f.name!r}")
        kwargs[f.name] = decode(_hints(cls)[f.name], value[f.name], f"{path}.{f.name}")
    return cls(**kwargs)


def _key(tp: Any, key: str, path: str) -> Any:
    if tp is int:
        _expect(key.lstrip("-").isdigit(), key, "an integer key", path)
        return int(key)
    return key


def _expect(ok: bool, value: Any, what: str, path: str) -> None:
    if not ok:
        raise DecodeError(f"{path}: expected {what}, found {value!r:.60}")
