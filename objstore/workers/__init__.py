"""Background services of a node (lifecycle, and later notifications, replication,
maintenance jobs, metrics history, purges): each a Twisted service on an injected clock
whose timer cannot die, acting only through the engine so that no client-visible rule
(object lock, durability, events, audit) can be skipped."""
