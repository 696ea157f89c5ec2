"""lizard_local."""
