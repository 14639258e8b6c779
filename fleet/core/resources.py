"""Kubernetes quantities and exact resource vectors.

Theory of operation: every quantity is parsed once, at the edge, into an exact
integer in the resource's base unit and never touches a float afterwards.

* ``cpu`` is kept in milli-cores (``500m`` -> 500, ``2`` -> 2000).
* byte resources (``memory``, ``ephemeral-storage``, ``storage``,
  ``hugepages-*``) are kept in bytes, rounded up like Kubernetes' ``Value()``.
* every other resource (``nvidia.com/gpu``, ``gpu.fleet.io/<SKU>``,
  ``kube-queue/max-jobs``, any extended resource) is a count and must be a
  whole number.

A :class:`Resources` is an immutable vector over arbitrary resource names whose
absent entries are zero.  Limits where "absent" means "no limit" (a quota
node's ``max``) are compared with :meth:`Resources.first_over`, which only
looks at the limit's own names.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from fractions import Fraction
from typing import Final, TypeAlias

CPU: Final = "cpu"
MEMORY: Final = "memory"
GPU: Final = "nvidia.com/gpu"
MAX_JOBS: Final = "kube-queue/max-jobs"
TYPED_GPU_PREFIX: Final = "gpu.fleet.io/"

_BYTE_RESOURCES: Final = frozenset({"memory", "ephemeral-storage", "storage"})
_MILLI_RESOURCES: Final = frozenset({CPU})

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_MAX_EXPONENT: Final = 64
#: Characters the number of a quantity may have (int() and Fraction() refuse 4,300 digits).
_MAX_NUMBER: Final = 64
_QUANTITY_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))\Z"
)


class QuantityError(ValueError):
    """A text that is not a Kubernetes quantity, or not valid for its resource."""


def typed_gpu(sku: str) -> str:
    """The typed-quota resource name that counts GPUs of one SKU."""
    return TYPED_GPU_PREFIX + sku


def is_byte_resource(name: str) -> bool:
    return name in _BYTE_RESOURCES or name.startswith("hugepages-")


def parse_value(text: object) -> Fraction:
    """Parse a quantity into an exact rational number of base units."""
    if isinstance(text, bool):
        raise QuantityError(f"quantity {text!r} is a boolean, not a number")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        # YAML turns `0.5` into a float; its shortest repr is what the user wrote.
        text = repr(text)
    if not isinstance(text, str):
        raise QuantityError(f"quantity {text!r} must be a string or a number")
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    if len(match["num"]) > _MAX_NUMBER:
        raise QuantityError(f"{text!r} has more than {_MAX_NUMBER} digits")
    number = Fraction(match["num"])
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > _MAX_EXPONENT:
            # 10**huge would take unbounded time and memory; no real quantity needs it.
            raise QuantityError(f"{text!r}: exponent {exponent} is out of range")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["dec"] or ""]


def parse_quantity(resource: str, text: object) -> int:
    """Parse ``text`` as a quantity of ``resource`` into its exact base unit."""
    value = parse_value(text)
    if value < 0:
        raise QuantityError(f"{resource}: quantity {text!r} is negative")
    if resource in _MILLI_RESOURCES:
        milli = value * 1000
        # Kubernetes rounds sub-milli cpu up to the next milli-core.
        return -((-milli.numerator) // milli.denominator)
    if is_byte_resource(resource):
        return -((-value.numerator) // value.denominator)
    if value.denominator != 1:
        raise QuantityError(f"{resource}: quantity {text!r} must be a whole number")
    return int(value)


def format_quantity(resource: str, amount: int) -> str:
    """Render an exact amount the way a person would write it in YAML."""
    if resource in _MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if is_byte_resource(resource) and amount:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


class Resources:
    """An immutable, exact resource vector; absent names are zero.

    Zero entries are dropped so that equality and hashing are structural.  It
    reads like a ``Mapping[str, int]`` and is registered as one, but does not
    subclass it: compiled with that base, it crashed the garbage collector
    (ADR 0035).  Functions that take either say :data:`Amounts`.
    """

    __slots__ = ("_hash", "amounts")

    #: the nonzero amounts by name: read-only (a vector is immutable).  The core's
    #: hot loops read it directly, which saves the compiled core a call into
    #: this interpreted class (:mod:`fleet.compiled_core`)
    amounts: dict[str, int]
    _hash: int | None

    def __init__(self, values: Amounts | Iterable[tuple[str, int]] = ()) -> None:
        # The common cases first: a mapping's ABC check costs more than the copy.
        items: Iterable[tuple[str, int]]
        if isinstance(values, dict):
            items = values.items()
        elif isinstance(values, Resources):
            items = values.amounts.items()
        elif isinstance(values, (tuple, list)) or not isinstance(values, Mapping):
            items = values
        else:
            items = values.items()
        self.amounts = {k: v for k, v in items if v}
        self._hash = None

    @classmethod
    def limits(cls, values: Amounts) -> Resources:
        """A vector of limits (a quota node's ``max``): names given as 0 are kept.

        A limit of 0 is not the absence of a limit: ``max: {nvidia.com/gpu: 0}``
        lets the node use no GPU, where a ``max`` without the name lets it use
        any.  Such a vector is equal only to vectors with the same zero entries.
        """
        return cls._raw(dict(_pairs(values)))

    @classmethod
    def _raw(cls, values: dict[str, int]) -> Resources:
        obj = Resources()
        obj.amounts = values
        return obj

    @classmethod
    def parse(cls, quantities: Mapping[str, str | int | float]) -> Resources:
        """Build a vector from a ``{name: quantity}`` mapping as written in YAML."""
        return cls({name: parse_quantity(name, q) for name, q in quantities.items()})

    # Mapping protocol -------------------------------------------------------
    def __getitem__(self, key: str) -> int:
        return self.amounts.get(key, 0)

    def __iter__(self) -> Iterator[str]:
        return iter(self.amounts)

    def __len__(self) -> int:
        return len(self.amounts)

    def __contains__(self, key: object) -> bool:
        return key in self.amounts

    # The dict's own views: much faster than the Mapping mixins on hot paths.
    def keys(self) -> KeysView[str]:
        return self.amounts.keys()

    def items(self) -> ItemsView[str, int]:
        return self.amounts.items()

    def values(self) -> ValuesView[int]:
        return self.amounts.values()

    def get(self, key: str, default: int = 0) -> int:
        return self.amounts.get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self.amounts == other.amounts
        if isinstance(other, Mapping):
            return self.amounts == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self.amounts.items()))
        return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled by its amounts alone: the cached hash belongs to this process
        # (a string's hash differs from one interpreter to the next), so the
        # process that unpickles it hashes it afresh.
        return (_unpickled, (dict(self.amounts),))

    def __repr__(self) -> str:
        return f"Resources({self.to_quantities()!r})"

    # Arithmetic -------------------------------------------------------------
    def __add__(self, other: Amounts) -> Resources:
        out = dict(self.amounts)
        for k, v in _pairs(other):
            s = out.get(k, 0) + v
            if s:
                out[k] = s
            else:
                out.pop(k, None)
        return Resources._raw(out)

    def __sub__(self, other: Amounts) -> Resources:
        out = dict(self.amounts)
        for k, v in _pairs(other):
            s = out.get(k, 0) - v
            if s:
                out[k] = s
            else:
                out.pop(k, None)
        return Resources._raw(out)

    def scale(self, factor: int) -> Resources:
        if factor == 0:
            return ZERO
        return Resources._raw({k: v * factor for k, v in self.amounts.items()})

    def clamp_min_zero(self) -> Resources:
        return Resources._raw({k: v for k, v in self.amounts.items() if v > 0})

    def le(self, other: Amounts) -> bool:
        """Every dimension of self is at most other's (absent = zero on both sides)."""
        theirs = other.amounts if isinstance(other, Resources) else other
        return all(v <= theirs.get(k, 0) for k, v in self.amounts.items()) and all(
            v >= 0 for k, v in theirs.items() if k not in self.amounts
        )

    def any_gt(self, other: Amounts) -> bool:
        """Some dimension of self exceeds other's (absent = zero)."""
        return not self.le(other)

    def is_nonnegative(self) -> bool:
        return all(v >= 0 for v in self.amounts.values())

    def first_over(self, limit: Amounts) -> str | None:
        """The first of ``limit``'s own names where self exceeds it, else None.

        Names absent from ``limit`` are unlimited: this is how a quota node's
        ``max`` is read.
        """
        for k, cap in _pairs(limit):
            if self.amounts.get(k, 0) > cap:
                return k
        return None

    def only(self, names: Iterable[str]) -> Resources:
        return Resources._raw({k: self.amounts[k] for k in names if k in self.amounts})

    def to_quantities(self) -> dict[str, str]:
        return {k: format_quantity(k, v) for k, v in sorted(self.amounts.items())}


Mapping.register(Resources)

#: what reads like a vector of amounts: a :class:`Resources` or any mapping
Amounts: TypeAlias = "Resources | Mapping[str, int]"


def _pairs(values: Amounts) -> ItemsView[str, int]:
    """The (name, amount) pairs of a vector or a mapping."""
    return values.amounts.items() if isinstance(values, Resources) else values.items()


ZERO: Final = Resources()
ONE_JOB: Final = Resources({MAX_JOBS: 1})


def _unpickled(amounts: dict[str, int]) -> Resources:
    """A vector from pickled amounts, exactly (a limit's zeros are kept)."""
    return Resources._raw(amounts)
