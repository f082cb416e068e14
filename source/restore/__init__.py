"""The restore: plan, execution, its own state and offset map, record selection, the producer,
throttling, what it takes from saved topic settings, and the warm standby (`restore --follow`)."""
