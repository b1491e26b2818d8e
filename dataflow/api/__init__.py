"""The REST API: DRF views over the same services the admin, TOML files and commands use.

Views parse, call a service or selector, and render; ``errors.exception_handler`` turns the
services' refusals into HTTP answers (ConfigError 400 keyed by the dotted field name,
FlowStateError 409, an oversize body 413).
"""
