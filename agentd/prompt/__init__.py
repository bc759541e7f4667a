"""Prompt assembly under the model's real context window."""
