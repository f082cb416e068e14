"""Object stores: the interface, a local directory, S3, and opening one from a location URI."""
