"""Service functions: the one way in for the admin, the API, commands, tasks and TOML files."""
