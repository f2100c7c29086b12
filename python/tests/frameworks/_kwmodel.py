"""A stand-in for the one pydantic behaviour the framework stand-ins need (pydantic itself cannot be
installed here): models built from their annotations, constructed by keyword only, with required
fields (no default) enforced, ``model_validate`` from a mapping and ``model_dump`` back, and
``frozen=True`` refusing assignment. Not pydantic: no coercion, no validation of types."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

_MISSING = object()


class KwModel:
    _frozen: ClassVar[bool] = False

    def __init_subclass__(cls, frozen: bool = False, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._frozen = frozen or cls._frozen

    @classmethod
    def _fields(cls) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name.startswith("_") or name in ("model_config",):
                    continue
                fields[name] = klass.__dict__.get(name, _MISSING) if name in klass.__dict__ else fields.get(name, _MISSING)
        return fields

    def __init__(self, *args: Any, **values: Any) -> None:
        if args:
            raise TypeError(f"{type(self).__name__}() takes keyword arguments only")
        fields = self._fields()
        unknown = set(values) - set(fields)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown field(s) {sorted(unknown)}")
        for name, default in fields.items():
            if name in values:
                value = values[name]
            elif default is _MISSING:
                raise TypeError(f"{type(self).__name__}: field {name!r} is required")
            else:
                value = copy.deepcopy(default)
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise TypeError(f"{type(self).__name__} is frozen")
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.model_dump() == other.model_dump()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.model_dump().items())})"

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Any:
        return cls(**data)

    def model_dump(self, **_options: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self._fields():
            v = getattr(self, name)
            if _options.get("exclude_none") and v is None:
                continue
            if isinstance(v, KwModel):
                v = v.model_dump(**_options)
            elif isinstance(v, dict):
                v = {k: (x.model_dump(**_options) if isinstance(x, KwModel) else x) for k, x in v.items()}
            elif hasattr(v, "value") and _options.get("mode") == "json":
                v = v.value
            out[name] = v
        return out
