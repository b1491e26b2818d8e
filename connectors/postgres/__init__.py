"""PostgreSQL tables: an exactly-once table sink (``sink``: staged binary COPY, one move
transaction with a ledger)."""
