"""The one table of PostgreSQL types and what they become: the Arrow type a column lands
as, and so the Spark type a transform sees (the sink reads it backwards).

| PostgreSQL (Django field)                              | Arrow                    | Spark          |
|--------------------------------------------------------|--------------------------|----------------|
| boolean (BooleanField)                                 | bool                     | BOOLEAN        |
| smallint (SmallIntegerField, PositiveSmallIntegerField)| int16                    | SMALLINT       |
| integer (IntegerField, AutoField, PositiveIntegerField)| int32                    | INT            |
| bigint (BigIntegerField, BigAutoField, ...BigInteger)  | int64                    | BIGINT         |
| real / double precision (FloatField)                   | float32 / float64        | FLOAT / DOUBLE |
| numeric(p,s) (DecimalField)                            | decimal128(p,s)          | DECIMAL(p,s)   |
| numeric without precision                              | string (exact digits)    | STRING         |
| text, varchar, char (CharField, TextField, EmailField…)| string                   | STRING         |
| citext, enums, inet, cidr, macaddr (GenericIPAddress…) | string                   | STRING         |
| json, jsonb (JSONField)                                | string (the JSON text)   | STRING         |
| uuid (UUIDField)                                       | string                   | STRING         |
| bytea (BinaryField)                                    | binary                   | BINARY         |
| date (DateField)                                       | date32                   | DATE           |
| time (TimeField)                                       | time64[us]               | (no Spark time: read as BIGINT µs) |
| timestamptz (DateTimeField, USE_TZ)                    | timestamp[us, UTC]       | TIMESTAMP (the instant) |
| timestamp (DateTimeField without USE_TZ)               | timestamp[us]            | TIMESTAMP_NTZ  |
| interval (DurationField)                               | duration[us]             | BIGINT µs (months as 30 days, as Django's DurationField) |
| T[] (ArrayField)                                       | list<T>                  | ARRAY<T>       |
| anything else (ranges, hstore, xml, geometry…)         | string (its text form)   | STRING         |

NULLs stay NULL in every column. Types that become strings are cast to ``text`` in the
SELECT itself (``select_expression``), so the server writes their canonical text and no
client-side loader is needed for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from psycopg import sql

#: Arrow's decimal128 holds at most 38 digits; a wider numeric lands as its text.
MAX_DECIMAL_PRECISION = 38
#: PostgreSQL type name (pg_type.typname) -> Arrow type, for the types kept as values.
SCALARS: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "oid": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "interval": pa.duration("us"),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "name": pa.string(),
}
#: The types a psycopg client loads natively as the values above (no cast needed).
NATIVE = frozenset(SCALARS) - {"name"}
#: Integer types a chunk key may be (key ranges are cut over integers).
INTEGER_TYPES = frozenset({"int2", "int4", "int8"})


@dataclass(frozen=True)
class PgColumn:
    """A result column: its name, its PostgreSQL type (pg_type.typname, and for an array
    its element's), numeric precision and scale, and the Arrow type it lands as."""

    name: str
    type_name: str
    element: str | None = None
    precision: int | None = None
    scale: int | None = None

    @property
    def arrow_type(self) -> pa.DataType:
        if self.element is not None:
            return pa.list_(scalar_type(self.element, None, None))
        return scalar_type(self.type_name, self.precision, self.scale)

    @property
    def cast_to_text(self) -> bool:
        """Whether the SELECT casts the column to text (``text[]`` for an array)."""
        base = self.element if self.element is not None else self.type_name
        return pa.types.is_string(scalar_type(base, self.precision, self.scale)) and base not in NATIVE

    def select_expression(self, qualifier: str | None = None) -> sql.Composable:
        """The column in a SELECT list: itself, or cast to text, under its own name."""
        column = sql.Identifier(qualifier, self.name) if qualifier else sql.Identifier(self.name)
        if not self.cast_to_text:
            return column
        cast = sql.SQL("text[]" if self.element is not None else "text")
        return sql.SQL("{}::{} AS {}").format(column, cast, sql.Identifier(self.name))

    @property
    def field(self) -> pa.Field:
        return pa.field(self.name, self.arrow_type, nullable=True)


def scalar_type(type_name: str, precision: int | None, scale: int | None) -> pa.DataType:
    """The Arrow type of a non-array PostgreSQL type (see the module's table)."""
    if type_name == "numeric":
        if precision is None or not 0 < precision <= MAX_DECIMAL_PRECISION:
            return pa.string()
        return pa.decimal128(precision, scale or 0)
    return SCALARS.get(type_name, pa.string())


def arrow_schema(columns: list[PgColumn]) -> pa.Schema:
    return pa.schema([column.field for column in columns])


#: What ``describe`` asks of the catalog for the type oids of a result.
TYPES_QUERY = """
SELECT t.oid, t.typname, e.typname
FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = ANY(%s)
"""


def numeric_modifier(typmod: int | None) -> tuple[int | None, int | None]:
    """(precision, scale) of a numeric's type modifier (-1 or None: unconstrained)."""
    if typmod is None or typmod < 4:
        return None, None
    value = typmod - 4
    return (value >> 16) & 0xFFFF, value & 0xFFFF
