"""HTTP plumbing shared by every API: site, request, body sink, SigV4, dispatch."""
