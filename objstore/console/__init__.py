"""The web console: a static single-page app (built from console/ by scripts/build-console
into objstore/console/static) and the resource serving it at /console (`resource.py`)."""
