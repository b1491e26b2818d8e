"""The dashboard: every flow at a glance, and a page per flow that refreshes itself."""
