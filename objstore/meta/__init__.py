"""The metadata store: one SQLAlchemy Core schema for SQLite and PostgreSQL.

Query functions live in one `*_queries.py` module per table family and take a `Database`
(database.py); `SyncMetaStore` (store.py) offers them inline, `MetaStore` (async_store.py)
on the DB thread pools (pool.py). Never imports Twisted web or Klein."""
