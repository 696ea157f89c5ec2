"""smolagents_lizard."""
