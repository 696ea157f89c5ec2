"""lizard_core."""
