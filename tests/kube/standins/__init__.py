"""Stand-ins for member controllers that cannot be built here, for the member tests."""
