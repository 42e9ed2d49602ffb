"""Prometheus metrics of the node (a registry it owns, never the global default one) and
the periodic metrics history kept in the metadata database."""
