"""Scripts that check the code's shape (run by tests and by hand; see each module)."""
