"""What every format shares: the schema it lands, once it is known."""

from __future__ import annotations

import pyarrow as pa

from source_support.errors import ConfigError


class SchemaHolder:
    """A format's ``schema``: given, inferred and set by ``with_schema``, or (None) not yet
    known."""

    schema: pa.Schema | None

    @property
    def known_schema(self) -> pa.Schema:
        """The schema, which a format needs to read (given, or inferred)."""
        if self.schema is None:
            raise ConfigError("format.schema", "is needed to read (none was given or inferred)")
        return self.schema

    def empty(self) -> pa.Table:
        """No records, in the format's schema."""
        return self.known_schema.empty_table()
