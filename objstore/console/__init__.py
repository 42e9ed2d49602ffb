"""console package."""
