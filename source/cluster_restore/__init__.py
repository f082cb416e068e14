"""Cluster state on the restore side: consumer-group offsets, ACLs and users, and the schema
registry, brought back beside the records."""
