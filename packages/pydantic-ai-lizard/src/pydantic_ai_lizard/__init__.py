"""pydantic_ai_lizard."""
