"""admin package."""
