"""The pure replication rules, below `meta/`: which of two rows wins (LWW merge and write
stamps), the anti-entropy cursor rules, the control-plane merge plan, what a peer's answer
to a write acknowledges, and whether a certificate binds a node id.

Nothing here does I/O or imports Twisted; these modules import only the standard library,
`cryptography`, `objstore.config`, `objstore.errors` and the plain data of
`objstore.meta.records`. `engine/`, `meta/` and `http/` take their rules from here and never
import `cluster/`, which holds the moving parts (membership, the client, the routes,
fan-out, anti-entropy, repair). docs/ARCHITECTURE.md "Import rules"; checked by
tests/unit/test_import_rules.py.
"""
