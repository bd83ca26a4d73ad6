"""File safety: signals, temp names, locks, fault injection for tests, the Transaction."""
