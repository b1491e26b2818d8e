"""One package per external system. Each registers its types through its entry point in
``pyproject.toml`` (``source_support.plugins``); importing a connector registers nothing."""
