"""Metadata store: one SQLAlchemy Core schema for SQLite and PostgreSQL, run on a DB thread pool."""
