"""The project stays honest: docs generated and linked, ruff-clean, this test tree's rules."""
